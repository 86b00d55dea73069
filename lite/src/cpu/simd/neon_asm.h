// What the NEON micro-kernels' inline assembly repeats: zeroing their accumulator registers before the loop, adding
// a second set of float16 accumulators into the first, and storing them, four to a 64-byte st1, to %[out] (advanced
// past them) after it. String pieces to splice into an asm template; `ty` is the lane arrangement stored ("4s", "8h").
#pragma once

#define LITE_ASM_ZERO4(a, b, c, d) \
  "movi " a ".16b, #0\n\t movi " b ".16b, #0\n\t movi " c ".16b, #0\n\t movi " d ".16b, #0\n\t"
#define LITE_ASM_ZERO_V16_V31                                                                              \
  LITE_ASM_ZERO4("v16", "v17", "v18", "v19") LITE_ASM_ZERO4("v20", "v21", "v22", "v23")                  \
  LITE_ASM_ZERO4("v24", "v25", "v26", "v27") LITE_ASM_ZERO4("v28", "v29", "v30", "v31")
#define LITE_ASM_ZERO_V8_V31 \
  LITE_ASM_ZERO4("v8", "v9", "v10", "v11") LITE_ASM_ZERO4("v12", "v13", "v14", "v15") LITE_ASM_ZERO_V16_V31

#define LITE_ASM_STORE4(a, b, c, d, ty) \
  "st1 {" a "." ty ", " b "." ty ", " c "." ty ", " d "." ty "}, [%[out]], #64\n\t"
#define LITE_ASM_STORE_V16_V31(ty)                                                                          \
  LITE_ASM_STORE4("v16", "v17", "v18", "v19", ty) LITE_ASM_STORE4("v20", "v21", "v22", "v23", ty)        \
  LITE_ASM_STORE4("v24", "v25", "v26", "v27", ty) LITE_ASM_STORE4("v28", "v29", "v30", "v31", ty)
#define LITE_ASM_STORE_V8_V31(ty) \
  LITE_ASM_STORE4("v8", "v9", "v10", "v11", ty) LITE_ASM_STORE4("v12", "v13", "v14", "v15", ty) LITE_ASM_STORE_V16_V31(ty)

// The 4 x 16 dot-product block's step for one lane: rows' values in v0-v3 (lane `lane` of each), four B vectors in
// v4-v7 (4 columns each), accumulators v16-v31 (row r: v16 + 4r ..). `op` sdot / bfdot, `bt` / `at` the B and A
// element arrangements ("16b" / "4b", "8h" / "2h").
#define LITE_ASM_DOT_ROW(op, bt, at, c0, c1, c2, c3, areg, lane)                                              \
  op " " c0 ".4s, v4." bt ", " areg "." at "[" #lane "]\n\t " op " " c1 ".4s, v5." bt ", " areg "." at "[" #lane \
     "]\n\t " op " " c2 ".4s, v6." bt ", " areg "." at "[" #lane "]\n\t " op " " c3 ".4s, v7." bt ", " areg "." at \
     "[" #lane "]\n\t"
#define LITE_ASM_DOT_4X4(op, bt, at, lane)                                                                     \
  LITE_ASM_DOT_ROW(op, bt, at, "v16", "v17", "v18", "v19", "v0", lane)                                        \
  LITE_ASM_DOT_ROW(op, bt, at, "v20", "v21", "v22", "v23", "v1", lane)                                        \
  LITE_ASM_DOT_ROW(op, bt, at, "v24", "v25", "v26", "v27", "v2", lane)                                        \
  LITE_ASM_DOT_ROW(op, bt, at, "v28", "v29", "v30", "v31", "v3", lane)

// v16-v23 += v24-v31 in float16 lanes: the float16 tiles' odd-depth accumulators into the even ones after the loop.
#define LITE_ASM_FOLD_V24_V31_8H                                                                            \
  "fadd v16.8h, v16.8h, v24.8h\n\t fadd v17.8h, v17.8h, v25.8h\n\t"                                         \
  "fadd v18.8h, v18.8h, v26.8h\n\t fadd v19.8h, v19.8h, v27.8h\n\t"                                         \
  "fadd v20.8h, v20.8h, v28.8h\n\t fadd v21.8h, v21.8h, v29.8h\n\t"                                         \
  "fadd v22.8h, v22.8h, v30.8h\n\t fadd v23.8h, v23.8h, v31.8h\n\t"
