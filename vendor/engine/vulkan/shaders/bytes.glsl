// bytes.glsl — reading the GGUF block formats out of uint storage buffers.
// The blocks are byte structures (34 bytes for Q8_0, 18 for Q4_0, ...), not
// word aligned, so fields are read as bytes and 16-bit halves of words.
// A macro per buffer, since GLSL functions cannot take a buffer argument.
#define BYTE_OF(buf, off) ((buf[(off) >> 2] >> (((off) & 3u) * 8u)) & 0xffu)
// 16-bit field at an even byte offset
#define U16_OF(buf, off) ((buf[(off) >> 2] >> (((off) & 2u) * 8u)) & 0xffffu)
// signed byte
#define I8_OF(buf, off) (int(BYTE_OF(buf, off) << 24) >> 24)
// 32-bit little-endian field at an even byte offset
#define U32_OF(buf, off) (U16_OF(buf, off) | (U16_OF(buf, (off) + 2u) << 16))

float half_bits_to_float(uint h) { return unpackHalf2x16(h).x; }
float bf16_bits_to_float(uint h) { return uintBitsToFloat(h << 16); }
