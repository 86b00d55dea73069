// AMX tile instructions as inline assembly with the memory effects stated. GCC 12's intrinsics (amxtileintrin.h)
// declare none: `_tile_loadconfig` tells the compiler it reads 8 bytes (the rest of the 64-byte configuration was
// dead-store-eliminated: ldtilecfg then faulted on a zero palette's rows), and `_tile_loadd` / `_tile_stored` take
// plain register operands, so stores into a buffer a tile then loads, or reads of what a tile stored, could be
// reordered or dropped. Each macro here clobbers "memory". Callers check CpuHasAmxBf16 / CpuHasAmxInt8 (which also
// asked the kernel for the tile state) before any of these run.
#pragma once
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace lite {

// Palette 1's configuration: bytes per row and rows of each of the 8 tiles (tmm0-7).
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxConfig) == 64, "ldtilecfg reads 64 bytes");

inline void AmxLoadConfig(const AmxConfig& cfg) { __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory"); }
// The kernels' one layout (AmxStep below), for this thread until AmxRelease: every tile 16 rows of 64 bytes, except
// that a_bytes < 64 makes the A tiles (tmm4-5) 16 rows of a_bytes and the B tiles (tmm6-7) a_bytes / 4 rows: steps
// of less depth (the dynamic-quant products' blocks of 32 int8 values).
inline void AmxConfigureTiles(int a_bytes = 64) {
  AmxConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  cfg.colsb[4] = cfg.colsb[5] = static_cast<uint16_t>(a_bytes);
  cfg.rows[6] = cfg.rows[7] = static_cast<uint8_t>(a_bytes / 4);
  AmxLoadConfig(cfg);
}
// Back to the initial state: no tile data to save on a context switch.
inline void AmxRelease() { __asm__ volatile("tilerelease" ::: "memory"); }

// The tiles configured (AmxConfigureTiles) for this scope on this thread, released at its end; nothing when off.
class AmxTileScope {
 public:
  explicit AmxTileScope(bool on) : on_(on) {
    if (on_) AmxConfigureTiles();
  }
  ~AmxTileScope() {
    if (on_) AmxRelease();
  }
  AmxTileScope(const AmxTileScope&) = delete;
  AmxTileScope& operator=(const AmxTileScope&) = delete;

 private:
  bool on_;
};

}  // namespace lite

#define LITE_AMX_STR(x) #x
// tmm<t> = 'rows' rows of 'colsb' bytes from base, `stride` bytes apart.
#define LITE_TILE_LOAD(t, base, stride)                                                                   \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" LITE_AMX_STR(t)::"r"(base), "r"(static_cast<int64_t>(stride)) \
                   : "memory")
#define LITE_TILE_STORE(t, base, stride)                                                                  \
  __asm__ volatile("tilestored %%tmm" LITE_AMX_STR(t) ", (%0,%1,1)" ::"r"(base), "r"(static_cast<int64_t>(stride)) \
                   : "memory")
#define LITE_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" LITE_AMX_STR(t)::)
// tmm<c> += tmm<a> x tmm<b>: bf16 pairs summed into float32 (TDPBF16PS).
#define LITE_TILE_DPBF16PS(c, a, b) \
  __asm__ volatile("tdpbf16ps %%tmm" LITE_AMX_STR(b) ", %%tmm" LITE_AMX_STR(a) ", %%tmm" LITE_AMX_STR(c)::)
// tmm<c> += tmm<a> x tmm<b>: unsigned x signed bytes, four per int32 sum (TDPBUSD).
#define LITE_TILE_DPBUSD(c, a, b) \
  __asm__ volatile("tdpbusd %%tmm" LITE_AMX_STR(b) ", %%tmm" LITE_AMX_STR(a) ", %%tmm" LITE_AMX_STR(c)::)
// tmm<c> += tmm<a> x tmm<b>: signed x signed bytes, four per int32 sum (TDPBSSD).
#define LITE_TILE_DPBSSD(c, a, b) \
  __asm__ volatile("tdpbssd %%tmm" LITE_AMX_STR(b) ", %%tmm" LITE_AMX_STR(a) ", %%tmm" LITE_AMX_STR(c)::)

namespace lite {

// The 32 x 32 blocks every AMX kernel here computes: sums in tmm0-3 (rows 0-15 / 16-31 x columns 0-15 / 16-31), A's
// two 16-row tiles in tmm4-5, B's two 16-column tiles in tmm6-7 (AmxConfigureTiles).
inline void AmxZeroSums() {
  LITE_TILE_ZERO(0);
  LITE_TILE_ZERO(1);
  LITE_TILE_ZERO(2);
  LITE_TILE_ZERO(3);
}

// The tile product a kernel's steps run: bf16 pairs into float32 (TDPBF16PS), uint8 x int8 (TDPBUSD) or int8 x int8
// (TDPBSSD) quads into int32.
enum class AmxDot { kBf16, kU8S8, kS8S8 };

// One depth step: A rows 0-15 at a (a_stride bytes apart; with `two` rows 16-31 at a2, a2_stride apart: a_stride
// where it is 0), B's tiles at b0 and b1 (b_stride bytes a row).
template <AmxDot kDot>
inline void AmxStep(const void* a, const void* a2, int64_t a_stride, const void* b0, const void* b1, int64_t b_stride,
                    bool two, int64_t a2_stride = 0) {
#define LITE_AMX_DOT(c, a, b)                                   \
  do {                                                          \
    if constexpr (kDot == AmxDot::kBf16) LITE_TILE_DPBF16PS(c, a, b); \
    else if constexpr (kDot == AmxDot::kU8S8) LITE_TILE_DPBUSD(c, a, b); \
    else LITE_TILE_DPBSSD(c, a, b);                             \
  } while (0)
  LITE_TILE_LOAD(4, a, a_stride);
  LITE_TILE_LOAD(6, b0, b_stride);
  LITE_TILE_LOAD(7, b1, b_stride);
  LITE_AMX_DOT(0, 4, 6);
  if (two) LITE_TILE_LOAD(5, a2, a2_stride ? a2_stride : a_stride);
  LITE_AMX_DOT(1, 4, 7);
  if (two) {
    LITE_AMX_DOT(2, 5, 6);
    LITE_AMX_DOT(3, 5, 7);
  }
#undef LITE_AMX_DOT
}

// The sums to memory as 32 rows of 32 four-byte values (128 bytes a row); rows 16-31 only with `two`.
inline void AmxStoreSums(void* sums, bool two) {
  char* at = static_cast<char*>(sums);
  LITE_TILE_STORE(0, at, 128);
  LITE_TILE_STORE(1, at + 64, 128);
  if (!two) return;
  LITE_TILE_STORE(2, at + 16 * 128, 128);
  LITE_TILE_STORE(3, at + 16 * 128 + 64, 128);
}

}  // namespace lite
#endif
