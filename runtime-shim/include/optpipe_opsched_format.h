/* Layout of the binary schedule `.opsched` (docs/opsched.md). Shared by the compiler's writer
 * (formats/opsched.cc) and the shim's reader so that the two cannot drift. Plain C, no
 * dependencies. Every multi-byte field is little-endian; offsets are from the start of the file. */
#ifndef OPTPIPE_OPSCHED_FORMAT_H_
#define OPTPIPE_OPSCHED_FORMAT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OPSCHED_MAGIC "OPSCHED\0"           /* 8 bytes */
#define OPSCHED_BYTE_ORDER_MARK 0x01020304u /* written LE: 04 03 02 01 */
#define OPSCHED_VERSION 2u   /* written; readers also accept version 1 (docs/opsched.md) */
#define OPSCHED_VERSION_1 1u /* no recompute: 56-byte stage records, no op R */

/* Header: fixed 192 bytes. */
#define OPSCHED_HEADER_SIZE 192u
#define OPSCHED_OFF_MAGIC 0u         /* u8[8] */
#define OPSCHED_OFF_BOM 8u           /* u32 */
#define OPSCHED_OFF_VERSION 12u      /* u32 */
#define OPSCHED_OFF_HEADER_CRC 16u   /* u32: CRC32 of header bytes [0,192) with this field as 0 */
#define OPSCHED_OFF_FLAGS 20u        /* u32: bit 0 = has offload link */
#define OPSCHED_OFF_FILE_SIZE 24u    /* u64: whole file, trailer included */
#define OPSCHED_OFF_RANKS 32u        /* u32 R */
#define OPSCHED_OFF_STAGES 36u       /* u32 S = R * v */
#define OPSCHED_OFF_MICROBATCHES 40u /* u32 m */
#define OPSCHED_OFF_CHUNKS 44u       /* u32 v */
#define OPSCHED_OFF_TIME_UNIT 48u    /* u8: 0 ms, 1 us */
#define OPSCHED_OFF_PLACEMENT 49u    /* u8: 0 loop, 1 vshape, 2 explicit */
#define OPSCHED_OFF_CHANNELS 50u     /* u8: 0 shared, 1 duplex */
#define OPSCHED_OFF_RESERVED0 51u    /* u8: 0 */
#define OPSCHED_OFF_STAGE_RECORD_SIZE 52u  /* u32 */
#define OPSCHED_OFF_RANK_RECORD_SIZE 56u   /* u32 */
#define OPSCHED_OFF_ACTION_RECORD_SIZE 60u /* u32 */
#define OPSCHED_OFF_P2P_LATENCY 64u        /* f64, time unit */
#define OPSCHED_OFF_D2H_BW 72u             /* f64, bytes per time unit (0 without link) */
#define OPSCHED_OFF_H2D_BW 80u             /* f64 */
#define OPSCHED_OFF_STAGE_TABLE 88u        /* u64 offset of the stage table */
#define OPSCHED_OFF_RANK_TABLE 96u         /* u64 offset of the rank table */
#define OPSCHED_OFF_SHA256 104u            /* u8[32]: profile SHA-256, raw bytes */
#define OPSCHED_OFF_METHOD 136u            /* char[56]: method name, NUL-padded */
#define OPSCHED_METHOD_SIZE 56u

/* Stage record (S of them, in stage order). */
#define OPSCHED_STAGE_RECORD_SIZE 72u
#define OPSCHED_STAGE_RECORD_SIZE_V1 56u /* version 1 ends after OPSCHED_STAGE_OFF_OFFL */
#define OPSCHED_STAGE_OFF_RANK 0u        /* u32 rank hosting the stage */
#define OPSCHED_STAGE_OFF_RESERVED 4u    /* u32 0 */
#define OPSCHED_STAGE_OFF_FORWARD 8u     /* f64 T_F */
#define OPSCHED_STAGE_OFF_BINPUT 16u     /* f64 T_B */
#define OPSCHED_STAGE_OFF_BWEIGHT 24u    /* f64 T_W */
#define OPSCHED_STAGE_OFF_ACT 32u        /* i64 A */
#define OPSCHED_STAGE_OFF_GRAD 40u       /* i64 G */
#define OPSCHED_STAGE_OFF_OFFL 48u       /* i64 O */
#define OPSCHED_STAGE_OFF_RECOMPUTE 56u  /* f64 T_R */
#define OPSCHED_STAGE_OFF_CHECKPOINT 64u /* i64 C, or -1 when the stage cannot recompute */

/* Rank record (R of them, in rank order): the per-rank offset table. */
#define OPSCHED_RANK_RECORD_SIZE 40u
#define OPSCHED_RANK_OFF_BUDGET 0u      /* i64 */
#define OPSCHED_RANK_OFF_STATIC 8u      /* i64 */
#define OPSCHED_RANK_OFF_LINK_GROUP 16u /* u32 */
#define OPSCHED_RANK_OFF_COUNT 20u      /* u32 number of actions */
#define OPSCHED_RANK_OFF_ACTIONS 24u    /* u64 offset of the first action record */
#define OPSCHED_RANK_OFF_RESERVED 32u   /* u64 0 */

/* Action record. */
#define OPSCHED_ACTION_RECORD_SIZE 40u
#define OPSCHED_ACTION_OFF_OP 0u         /* u8 op code below */
#define OPSCHED_ACTION_OFF_RESERVED 1u   /* u8[3] 0 */
#define OPSCHED_ACTION_OFF_STAGE 4u      /* u32 */
#define OPSCHED_ACTION_OFF_MICROBATCH 8u /* u32 */
#define OPSCHED_ACTION_OFF_RESERVED2 12u /* u32 0 */
#define OPSCHED_ACTION_OFF_START 16u     /* f64 predicted start */
#define OPSCHED_ACTION_OFF_END 24u       /* f64 predicted end */
#define OPSCHED_ACTION_OFF_BYTES 32u     /* i64 bytes moved (transfers), 0 otherwise */

/* Op codes (same order as optpipe::Op). */
#define OPSCHED_OP_F 0u
#define OPSCHED_OP_B 1u
#define OPSCHED_OP_W 2u
#define OPSCHED_OP_BW 3u
#define OPSCHED_OP_OFFLOAD 4u
#define OPSCHED_OP_RELOAD 5u
#define OPSCHED_OP_R 6u /* version 2 on */

#define OPSCHED_TRAILER_SIZE 4u /* u32 CRC32 of every byte before it */

/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as zlib's crc32(). Start with crc = 0. */
static inline uint32_t opsched_crc32(uint32_t crc, const void* data, size_t size) {
  const unsigned char* p = (const unsigned char*)data;
  crc = ~crc;
  while (size--) {
    crc ^= *p++;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

#ifdef __cplusplus
}
#endif

#endif /* OPTPIPE_OPSCHED_FORMAT_H_ */
