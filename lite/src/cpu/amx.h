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
// Every tile 16 rows of 64 bytes (the bf16 and int8 kernels' one shape), for this thread until AmxRelease.
inline void AmxConfigureFullTiles() {
  AmxConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  AmxLoadConfig(cfg);
}
// Back to the initial state: no tile data to save on a context switch.
inline void AmxRelease() { __asm__ volatile("tilerelease" ::: "memory"); }

// The tiles configured (AmxConfigureFullTiles) for this scope on this thread, released at its end; nothing when off.
class AmxTileScope {
 public:
  explicit AmxTileScope(bool on) : on_(on) {
    if (on_) AmxConfigureFullTiles();
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
#endif
