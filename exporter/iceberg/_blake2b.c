/* 8-byte BLAKE2b digests of many strings in one call, without the GIL when they are many:
   `path_hashes.utf8_digests`.

   hashlib.blake2b(path, digest_size=8) costs about 0.5 µs a path, nearly all of it Python's call, with
   the GIL held (53 ms of a 100,000-file table's Iceberg step). This computes the same digests (RFC 7693:
   BLAKE2b, no key, 8-byte output) for strings given as Arrow gives a binary column: one buffer of their
   bytes and the offsets where each starts and ends. The unit tests compare it with hashlib. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
};  /* rounds 10 and 11 take rows 0 and 1 again */

#define RELEASE_FROM (64 << 10)  /* bytes of strings: about 450 paths, 130 µs of hashing */

#define ROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define G(a, b, c, d, x, y)                \
    do {                                   \
        a = a + b + (x);                   \
        d = ROTR(d ^ a, 32);               \
        c = c + d;                         \
        b = ROTR(b ^ c, 24);               \
        a = a + b + (y);                   \
        d = ROTR(d ^ a, 16);               \
        c = c + d;                         \
        b = ROTR(b ^ c, 63);               \
    } while (0)

static uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* RFC 7693 F: one 128-byte block into the state h; t bytes hashed so far (with this block); last: the final block */
static void compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = IV[i];
    }
    v[12] ^= t;  /* the high word of the counter stays 0: no string here is 2^64 bytes */
    if (last) v[14] = ~v[14];
#define ROUND(r)                                                                      \
    do {                                                                              \
        G(v[0], v[4], v[8], v[12], m[SIGMA[(r) % 10][0]], m[SIGMA[(r) % 10][1]]);     \
        G(v[1], v[5], v[9], v[13], m[SIGMA[(r) % 10][2]], m[SIGMA[(r) % 10][3]]);     \
        G(v[2], v[6], v[10], v[14], m[SIGMA[(r) % 10][4]], m[SIGMA[(r) % 10][5]]);    \
        G(v[3], v[7], v[11], v[15], m[SIGMA[(r) % 10][6]], m[SIGMA[(r) % 10][7]]);    \
        G(v[0], v[5], v[10], v[15], m[SIGMA[(r) % 10][8]], m[SIGMA[(r) % 10][9]]);    \
        G(v[1], v[6], v[11], v[12], m[SIGMA[(r) % 10][10]], m[SIGMA[(r) % 10][11]]);  \
        G(v[2], v[7], v[8], v[13], m[SIGMA[(r) % 10][12]], m[SIGMA[(r) % 10][13]]);   \
        G(v[3], v[4], v[9], v[14], m[SIGMA[(r) % 10][14]], m[SIGMA[(r) % 10][15]]);   \
    } while (0)
    /* unrolled: each round's message words are known when compiled */
    ROUND(0); ROUND(1); ROUND(2); ROUND(3); ROUND(4); ROUND(5);
    ROUND(6); ROUND(7); ROUND(8); ROUND(9); ROUND(10); ROUND(11);
#undef ROUND
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* BLAKE2b of `data` with an 8-byte digest and no key: the digest is the first word of the state, as
   the little-endian int64 its 8 bytes are */
static int64_t blake2b8(const uint8_t *data, size_t size) {
    uint64_t h[8];
    memcpy(h, IV, sizeof h);
    h[0] ^= 0x01010000ULL ^ 8;  /* depth 1, fanout 1, no key, digest length 8 */
    uint64_t t = 0;
    while (size > 128) {
        t += 128;
        compress(h, data, t, 0);
        data += 128;
        size -= 128;
    }
    uint8_t block[128] = {0};
    if (size) memcpy(block, data, size);  /* an empty buffer's pointer may be NULL */
    compress(h, block, t + size, 1);
    return (int64_t)h[0];
}

/* digests(data, offsets) -> bytes: string i is data[offsets[i]:offsets[i + 1]], `offsets` a buffer of
   native int64 (Arrow's offsets, widened); its digest is bytes 8i to 8i + 8 of the result. */
static PyObject *digests(PyObject *module, PyObject *args) {
    Py_buffer data, offsets;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &offsets)) return NULL;
    PyObject *result = NULL;
    if (offsets.len % 8 || offsets.len < 8) {
        PyErr_Format(PyExc_ValueError, "offsets of %zd bytes: not one or more int64", offsets.len);
        goto done;
    }
    Py_ssize_t count = offsets.len / 8 - 1;
    const char *at = offsets.buf;  /* read with memcpy: the buffer need not be aligned */
    const uint8_t *bytes = data.buf;
    Py_ssize_t bad = -1;  /* the first string whose offsets are wrong */
    int64_t bad_start = 0, bad_end = 0;
    result = PyBytes_FromStringAndSize(NULL, count * 8);
    if (result == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    /* the GIL left only for much to hash: a thread that leaves it waits to take it back behind the
       others (a few paths in 0.5 µs, then tens of µs waiting, as hashlib's threshold has it too) */
    PyThreadState *saved = data.len >= RELEASE_FROM ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t start, end;
        memcpy(&start, at + 8 * i, 8);
        memcpy(&end, at + 8 * (i + 1), 8);
        if (start < 0 || end < start || end > data.len) {
            bad = i, bad_start = start, bad_end = end;
            break;
        }
        uint64_t digest = (uint64_t)blake2b8(bytes + start, (size_t)(end - start));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        digest = __builtin_bswap64(digest);
#endif
        memcpy(out + 8 * i, &digest, 8);
    }
    if (saved != NULL) PyEval_RestoreThread(saved);
    if (bad >= 0) {
        Py_CLEAR(result);
        if (bad_start < 0 || bad_end < bad_start)
            PyErr_Format(PyExc_ValueError, "string %zd: offsets %lld to %lld are negative or out of order", bad,
                         (long long)bad_start, (long long)bad_end);
        else
            PyErr_Format(PyExc_ValueError, "string %zd: offsets %lld to %lld are past the data's %zd bytes", bad,
                         (long long)bad_start, (long long)bad_end, data.len);
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    return result;
}

static PyMethodDef METHODS[] = {
    {"digests", digests, METH_VARARGS,
     "digests(data, offsets) -> bytes: the 8-byte BLAKE2b digest of each data[offsets[i]:offsets[i + 1]]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_blake2b", NULL, 0, METHODS};

PyMODINIT_FUNC PyInit__blake2b(void) { return PyModule_Create(&MODULE); }
