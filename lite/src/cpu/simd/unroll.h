// Unroll<N>(f) calls f(integral_constant<int, 0>) ... f(integral_constant<int, N - 1>), each inlined: loops over a
// kernel's accumulators written this way keep them in registers (GCC left a `#pragma GCC unroll` loop over them
// rolled, in memory, at half speed).
//
// Include it inside each `#pragma GCC target` region (and namespace) that uses it, with <type_traits> and <utility>
// included before: no include guard, on purpose. The functions then take that region's target, as the lambdas they
// inline do (GCC refuses to inline a function of a wider target into a narrower one).

template <typename F, int... I>
__attribute__((always_inline)) inline void UnrollSeq(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F>
__attribute__((always_inline)) inline void Unroll(F&& f) {
  UnrollSeq(f, std::make_integer_sequence<int, N>{});
}
