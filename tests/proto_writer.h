/* Hand-written protobuf wire bytes for the parser tests: what a peer could send,
 * including what protobuf-c itself would never write. Include after <cmocka.h>. */
#ifndef TPURT_PROTO_WRITER_H
#define TPURT_PROTO_WRITER_H

#include <stdint.h>
#include <string.h>

typedef struct {
  unsigned char b[1024];
  size_t n;
} pbuf;

static inline void put_raw(pbuf *p, const void *data, size_t n) {
  assert_true(n <= sizeof p->b - p->n);
  if (n) memcpy(p->b + p->n, data, n);
  p->n += n;
}

static inline void put_varint(pbuf *p, uint64_t v) {
  do {
    unsigned char byte = (unsigned char)(v & 0x7f);
    v >>= 7;
    byte |= v ? 0x80 : 0;
    put_raw(p, &byte, 1);
  } while (v);
}

/* A varint field; negatives get the 10-byte sign extension protobuf writes. */
static inline void put_int(pbuf *p, int field, int64_t v) {
  put_varint(p, (uint64_t)field << 3);
  put_varint(p, (uint64_t)v);
}

static inline void put_bytes(pbuf *p, int field, const void *data, size_t n) {
  put_varint(p, ((uint64_t)field << 3) | 2);
  put_varint(p, n);
  put_raw(p, data, n);
}

static inline void put_message(pbuf *p, int field, const pbuf *m) {
  put_bytes(p, field, m->b, m->n);
}

static inline void put_packed(pbuf *p, int field, const int32_t *v, size_t n) {
  pbuf body = {{0}, 0};
  for (size_t i = 0; i < n; ++i) put_varint(&body, (uint64_t)(int64_t)v[i]);
  put_message(p, field, &body);
}

static inline void put_unpacked(pbuf *p, int field, const int32_t *v, size_t n) {
  for (size_t i = 0; i < n; ++i) put_int(p, field, v[i]);
}

#endif /* TPURT_PROTO_WRITER_H */
