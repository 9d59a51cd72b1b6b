/* Compiled walk over the packets of a pcap or pcapng buffer, straight to TCP segments.
 *
 * It handles only the regular case: whole pcap records, or pcapng enhanced packet blocks, carrying
 * Ethernet (VLAN tags), Linux cooked v1/v2, raw IP or loopback frames with IPv4/IPv6 and a complete
 * TCP header. It stops before anything else (section and interface blocks, damage, a packet that is
 * not TCP or too short) and the Python readers (files.py, segments.py), the reference, take that
 * block; `kprotocol.capture.walk` drives both.
 *
 * With a `Sharing`, the walk keeps only the segments of one process's share of the Kafka connections
 * (several processes reading the same capture, each decoding its share): the rest never become
 * Python objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_BLOCK (256u << 20)
#define EPB 6u
#define DONE 0      /* reached `stop` */
#define MORE 1      /* the block or record at pos is not all in the buffer */
#define IRREGULAR 2 /* the Python reader takes the block or record at pos */

static inline uint32_t u16be(const unsigned char *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t u32(const unsigned char *p, int big) {
    return big ? ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]
               : ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | p[0];
}

/* ------------------------------------------------------------------ sharing */

/* Port pairs on a Kafka port, shared out among n processes: a pair seen for the first time goes to
 * the process with the fewest payload bytes so far (counting OPENING_WEIGHT for each pair it was
 * given). Every process sees every segment in the same order, so all of them agree without talking.
 * Keyed on the two ports (in either direction), so both directions of a connection, and a 4-tuple
 * reused later, stay with one process. The table grows with the pairs seen, at most one per packet. */
#define MAX_SHARES 64
#define OPENING_WEIGHT 4096

typedef struct {
    PyObject_HEAD
    int k, n;
    unsigned long long loads[MAX_SHARES];
    uint64_t *slots; /* (pair + 1) << 8 | owner; 0 is free */
    size_t capacity, used;
    unsigned char kafka[8192]; /* bitmap of the Kafka ports */
} Sharing;

static inline size_t slot_of(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static int grow(Sharing *s) {
    size_t capacity = s->capacity ? s->capacity * 2 : 1024, mask = capacity - 1;
    uint64_t *slots = PyMem_Calloc(capacity, sizeof *slots);
    if (!slots) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < s->capacity; i++) {
        if (!s->slots[i]) continue;
        size_t j = slot_of(s->slots[i] >> 8, mask);
        while (slots[j]) j = (j + 1) & mask;
        slots[j] = s->slots[i];
    }
    PyMem_Free(s->slots);
    s->slots = slots, s->capacity = capacity;
    return 0;
}

/* 1: the segment is this process's, 0: it is another's or on no Kafka port, -1: out of memory. */
static int keeps(Sharing *s, uint32_t sport, uint32_t dport, Py_ssize_t length) {
    if (!(s->kafka[sport >> 3] >> (sport & 7) & 1) && !(s->kafka[dport >> 3] >> (dport & 7) & 1)) return 0;
    uint32_t low = sport < dport ? sport : dport, high = sport ^ dport ^ low;
    uint64_t key = ((uint64_t)low << 16 | high) + 1;
    if (2 * (s->used + 1) > s->capacity && grow(s) < 0) return -1;
    size_t mask = s->capacity - 1, i = slot_of(key, mask);
    while (s->slots[i] && s->slots[i] >> 8 != key) i = (i + 1) & mask;
    int owner;
    if (s->slots[i]) {
        owner = (int)(s->slots[i] & 0xFF);
    } else {
        owner = 0;
        for (int j = 1; j < s->n; j++)
            if (s->loads[j] < s->loads[owner]) owner = j;
        s->loads[owner] += OPENING_WEIGHT;
        s->slots[i] = key << 8 | (uint64_t)owner;
        s->used++;
    }
    s->loads[owner] += (unsigned long long)length;
    return owner == s->k;
}

static int Sharing_init(Sharing *s, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"k", "n", "ports", NULL};
    PyObject *ports;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiO", names, &s->k, &s->n, &ports)) return -1;
    if (s->n < 1 || s->n > MAX_SHARES || s->k < 0 || s->k >= s->n) {
        PyErr_Format(PyExc_ValueError, "sharing: process k of n needs 0 <= k < n <= %d", MAX_SHARES);
        return -1;
    }
    PyObject *iterator = PyObject_GetIter(ports), *port;
    if (!iterator) return -1;
    while ((port = PyIter_Next(iterator))) {
        long value = PyLong_AsLong(port);
        Py_DECREF(port);
        if (value < 0 || value > 0xFFFF) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "sharing: a port is 0 to 65535");
            break;
        }
        s->kafka[value >> 3] |= (unsigned char)(1 << (value & 7));
    }
    Py_DECREF(iterator);
    return PyErr_Occurred() ? -1 : 0;
}

static void Sharing_dealloc(Sharing *s) {
    PyMem_Free(s->slots);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Sharing_keeps(Sharing *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "keeps(sport, dport, length)"); return NULL; }
    long sport = PyLong_AsLong(args[0]), dport = PyLong_AsLong(args[1]);
    Py_ssize_t length = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (sport < 0 || sport > 0xFFFF || dport < 0 || dport > 0xFFFF || length < 0) {
        PyErr_SetString(PyExc_ValueError, "keeps: ports are 0 to 65535, lengths not negative");
        return NULL;
    }
    int kept = keeps(s, (uint32_t)sport, (uint32_t)dport, length);
    if (kept < 0) return NULL;
    return PyBool_FromLong(kept);
}

static PyObject *Sharing_loads(Sharing *s, void *closure) {
    PyObject *out = PyList_New(s->n);
    for (int i = 0; out && i < s->n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(s->loads[i]);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyMethodDef Sharing_methods[] = {
    {"keeps", (PyCFunction)(void (*)(void))Sharing_keeps, METH_FASTCALL,
     "keeps(sport, dport, length): whether a segment between these ports is this process's (counting it)."},
    {NULL},
};

static PyGetSetDef Sharing_getset[] = {
    {"loads", (getter)Sharing_loads, NULL, "payload bytes (and opening weights) of each process so far", NULL},
    {NULL},
};

static PyTypeObject SharingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kprotocol.capture._walk.Sharing",
    .tp_doc = "Sharing(k, n, ports): process k of n's share of the Kafka connections of a capture.",
    .tp_basicsize = sizeof(Sharing),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sharing_init,
    .tp_dealloc = (destructor)Sharing_dealloc,
    .tp_methods = Sharing_methods,
    .tp_getset = Sharing_getset,
};

/* ------------------------------------------------------------------ the walk */

/* Address strings of the current call, newest first (a capture has few addresses). */
#define CACHED 8
typedef struct {
    unsigned char raw[CACHED][17]; /* length (4 or 16), then the address */
    PyObject *text[CACHED];
    int used;
} Names;

static PyObject *address(Names *names, const unsigned char *raw, int size) {
    for (int i = 0; i < names->used; i++)
        if (names->raw[i][0] == size && memcmp(names->raw[i] + 1, raw, size) == 0) return names->text[i];
    char text[INET6_ADDRSTRLEN];
    if (!inet_ntop(size == 4 ? AF_INET : AF_INET6, raw, text, sizeof text)) {
        PyErr_SetString(PyExc_ValueError, "inet_ntop failed");
        return NULL;
    }
    PyObject *value = PyUnicode_FromString(text);
    if (!value) return NULL;
    int slot;
    if (names->used < CACHED) {
        slot = names->used++;
    } else { /* forget the oldest */
        slot = CACHED - 1;
        Py_DECREF(names->text[slot]);
    }
    memmove(names->raw[1], names->raw[0], (size_t)slot * sizeof names->raw[0]);
    memmove(names->text + 1, names->text, (size_t)slot * sizeof names->text[0]);
    names->raw[0][0] = (unsigned char)size;
    memcpy(names->raw[0] + 1, raw, size);
    names->text[0] = value;
    return value;
}

/* The TCP segment of one captured frame: 1 appended, 2 another process's (`sharing`), 0 not a
 * regular TCP segment, -1 error. */
static int segment(PyObject *out, PyTypeObject *type, Names *names, Sharing *sharing, long number, double time,
                   long link, const unsigned char *d, Py_ssize_t n) {
    Py_ssize_t pos;
    uint32_t ethertype;
    switch (link) {
    case 1: /* Ethernet */
        if (n < 14) return 0;
        ethertype = u16be(d + 12);
        pos = 14;
        while (ethertype == 0x8100 || ethertype == 0x88A8 || ethertype == 0x9100) {
            if (n < pos + 4) return 0;
            ethertype = u16be(d + pos + 2);
            pos += 4;
        }
        break;
    case 113: /* Linux cooked v1 */
        if (n < 16) return 0;
        ethertype = u16be(d + 14);
        pos = 16;
        break;
    case 276: /* Linux cooked v2 */
        if (n < 20) return 0;
        ethertype = u16be(d);
        pos = 20;
        break;
    case 101: case 12: case 14: /* raw IP */
        if (n < 1) return 0;
        ethertype = d[0] >> 4 == 4 ? 0x0800 : 0x86DD;
        pos = 0;
        break;
    case 0: case 108: { /* BSD loopback, OpenBSD loopback */
        if (n < 4) return 0;
        uint32_t family = u32(d, link == 108);
        if (family > 0xFFFF) family = u32(d, link != 108);
        ethertype = family == AF_INET ? 0x0800 : 0x86DD;
        pos = 4;
        break;
    }
    default:
        return 0;
    }
    const unsigned char *ip = d + pos, *src, *dst;
    Py_ssize_t size = n - pos, header, end;
    int width;
    if (ethertype == 0x0800) {
        if (size < 20 || ip[9] != 6 || (u16be(ip + 6) & 0x1FFF)) return 0;
        header = (ip[0] & 0x0F) * 4;
        if (header < 20 || size < header) return 0;
        Py_ssize_t total = u16be(ip + 2);
        end = total && total < size ? total : size;
        src = ip + 12, dst = ip + 16, width = 4;
    } else if (ethertype == 0x86DD) {
        if (size < 40) return 0;
        unsigned next = ip[6];
        header = 40;
        while (next == 0 || next == 43 || next == 60) {
            if (size < header + 8) return 0;
            next = ip[header];
            header += (ip[header + 1] + 1) * 8;
        }
        if (next != 6) return 0;
        Py_ssize_t payload = u16be(ip + 4);
        end = payload && 40 + payload < size ? 40 + payload : size;
        src = ip + 8, dst = ip + 24, width = 16;
    } else {
        return 0;
    }
    if (end - header < 20) return 0;
    const unsigned char *tcp = ip + header;
    Py_ssize_t offset = (tcp[12] >> 4) * 4;
    if (end - header < offset) return 0;
    if (sharing) {
        int kept = keeps(sharing, u16be(tcp), u16be(tcp + 2), end - header - offset);
        if (kept <= 0) return kept < 0 ? -1 : 2;
    }
    PyObject *source = address(names, src, width);
    if (!source) return -1;
    Py_INCREF(source);
    PyObject *destination = address(names, dst, width);
    if (!destination) { Py_DECREF(source); return -1; }
    Py_INCREF(destination);
    PyObject *item = type->tp_alloc(type, 10);
    if (!item) { Py_DECREF(source); Py_DECREF(destination); return -1; }
    PyTuple_SET_ITEM(item, 2, source);
    PyTuple_SET_ITEM(item, 4, destination);
    PyObject *fields[8] = {
        PyLong_FromLong(number), PyFloat_FromDouble(time), PyLong_FromLong(u16be(tcp)),
        PyLong_FromLong(u16be(tcp + 2)), PyLong_FromUnsignedLong(u32(tcp + 4, 1)),
        PyLong_FromUnsignedLong(u32(tcp + 8, 1)), PyLong_FromLong(tcp[13]),
        PyBytes_FromStringAndSize((const char *)tcp + offset, end - header - offset),
    };
    static const int at[8] = {0, 1, 3, 5, 6, 7, 8, 9};
    int failed = 0;
    for (int i = 0; i < 8; i++) {
        if (!fields[i]) failed = 1;
        PyTuple_SET_ITEM(item, at[i], fields[i]);
    }
    if (failed || PyList_Append(out, item) < 0) { Py_DECREF(item); return -1; }
    Py_DECREF(item);
    return 1;
}

/* walk(buffer, pos, stop, pcap, big, link_type, unit, limit, interfaces, number, segment_type, sharing)
 *   -> (segments, pos, number, last_seconds, status) */
static PyObject *walk(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12) { PyErr_SetString(PyExc_TypeError, "walk takes 12 arguments"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), stop = PyLong_AsSsize_t(args[2]);
    int pcap = PyObject_IsTrue(args[3]), big = PyObject_IsTrue(args[4]);
    long link_type = PyLong_AsLong(args[5]);
    double unit = PyFloat_AsDouble(args[6]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[7]);
    PyObject *interfaces = args[8];
    long number = PyLong_AsLong(args[9]);
    PyTypeObject *type = (PyTypeObject *)args[10];
    Sharing *sharing = args[11] == Py_None ? NULL : (Sharing *)args[11];
    PyObject *out = NULL, *last = Py_None;
    long long last_seconds = -1;
    Names names = {.used = 0};
    int status = DONE;
    if (PyErr_Occurred()) goto fail;
    if (!(PyTuple_Check(interfaces) || PyList_Check(interfaces)) || !PyType_Check(args[10]) || !PyType_IsSubtype(type, &PyTuple_Type) ||
        (sharing && !PyObject_TypeCheck(args[11], &SharingType))) {
        PyErr_SetString(PyExc_TypeError, "walk: interfaces must be a tuple or a list, segment_type a tuple type, "
                                         "sharing None or a Sharing");
        goto fail;
    }
    if (!(out = PyList_New(0))) goto fail;
    const unsigned char *buf = view.buf;
    Py_ssize_t n = view.len;
    while (pos < stop) {
        const unsigned char *p = buf + pos;
        const unsigned char *data;
        Py_ssize_t captured, next;
        double time;
        long link;
        if (pcap) {
            if (n - pos < 16) { status = MORE; break; }
            uint32_t seconds = u32(p, big), fraction = u32(p + 4, big);
            captured = u32(p + 8, big);
            if (captured > limit) { status = IRREGULAR; break; }
            if (n - pos - 16 < captured) { status = MORE; break; }
            time = (double)seconds + (double)fraction * unit;
            data = p + 16, link = link_type, next = pos + 16 + captured;
            last_seconds = seconds;
        } else {
            if (n - pos < 12) { status = MORE; break; }
            uint32_t kind = u32(p, big), length = u32(p + 4, big);
            if (kind != EPB || length < 32 || length % 4 || length > MAX_BLOCK) { status = IRREGULAR; break; }
            if (n - pos < (Py_ssize_t)length) { status = MORE; break; }
            uint32_t interface = u32(p + 8, big);
            captured = u32(p + 20, big);
            if (u32(p + length - 4, big) != length || interface >= (uint32_t)PySequence_Fast_GET_SIZE(interfaces) ||
                captured > (Py_ssize_t)length - 32) { status = IRREGULAR; break; }
            PyObject *described = PySequence_Fast_GET_ITEM(interfaces, interface);  /* not copied: no Python runs here */
            link = PyLong_AsLong(PyTuple_GET_ITEM(described, 0));
            double scale = PyFloat_AsDouble(PyTuple_GET_ITEM(described, 1));
            if (PyErr_Occurred()) goto fail;
            uint64_t stamp = ((uint64_t)u32(p + 12, big) << 32) | u32(p + 16, big);
            time = (double)stamp * scale;
            data = p + 28, next = pos + length;
        }
        int found = segment(out, type, &names, sharing, number + 1, time, link, data, captured);
        if (found < 0) goto fail;
        if (found == 0) { status = IRREGULAR; break; }
        number++;
        pos = next;
    }
    for (int i = 0; i < names.used; i++) Py_DECREF(names.text[i]);
    names.used = 0;
    PyBuffer_Release(&view);
    if (last_seconds >= 0) {
        if (!(last = PyLong_FromLongLong(last_seconds))) { Py_DECREF(out); return NULL; }
    } else {
        Py_INCREF(last);
    }
    return Py_BuildValue("(NnlNi)", out, pos, number, last, status);
fail:
    for (int i = 0; i < names.used; i++) Py_DECREF(names.text[i]);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(buffer, pos, stop, pcap, big, link_type, unit, limit, interfaces, number, segment_type, sharing): "
     "(segments, pos, number, last_seconds, status) over the regular packets from pos."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kprotocol.capture._walk", "Compiled walk from capture bytes to TCP segments.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walk(void) {
    if (PyType_Ready(&SharingType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddType(m, &SharingType) < 0 || PyModule_AddIntConstant(m, "DONE", DONE) < 0 || PyModule_AddIntConstant(m, "MORE", MORE) < 0 ||
              PyModule_AddIntConstant(m, "IRREGULAR", IRREGULAR) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
