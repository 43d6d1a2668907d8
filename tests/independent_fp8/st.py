"""Minimal safetensors reader/writer (no torch, no ml_dtypes): BF16/F16/F32/F64/I32/F8_E4M3 read as numpy."""
import json, struct
import numpy as np


def _e4m3_to_f32(b):
    b = b.astype(np.uint32)
    s = (b >> 7) & 1
    e = (b >> 3) & 0xF
    m = b & 7
    v = np.where(e == 0, m.astype(np.float64) * 2.0 ** -9,
                 (1.0 + m / 8.0) * np.exp2(e.astype(np.float64) - 7))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(s == 1, -v, v).astype(np.float32)


def read(path):
    with open(path, 'rb') as f:
        raw = f.read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    meta = hdr.pop('__metadata__', {}) or {}
    out = {}
    for k, d in hdr.items():
        a, b = d['data_offsets']
        buf = raw[base + a: base + b]
        dt, shp = d['dtype'], d['shape']
        if dt == 'BF16':
            u = np.frombuffer(buf, np.uint16).astype(np.uint32) << 16
            t = u.view(np.float32)
        elif dt == 'F16':
            t = np.frombuffer(buf, np.float16).astype(np.float32)
        elif dt == 'F32':
            t = np.frombuffer(buf, np.float32)
        elif dt == 'F64':
            t = np.frombuffer(buf, np.float64)
        elif dt == 'I32':
            t = np.frombuffer(buf, np.int32)
        elif dt == 'F8_E4M3':
            t = _e4m3_to_f32(np.frombuffer(buf, np.uint8))
        elif dt == 'F8_E8M0':
            t = np.exp2(np.frombuffer(buf, np.uint8).astype(np.float64) - 127).astype(np.float32)
        else:
            raise ValueError(dt)
        out[k] = np.array(t).reshape(shp)
    return out, meta


def write(path, tensors, meta):
    hdr = {'__metadata__': meta}
    bufs = []
    off = 0
    for k, v in tensors.items():
        v = np.ascontiguousarray(v)
        if v.dtype == np.float32:
            dt = 'F32'; b = v.tobytes()
        elif v.dtype == np.float64:
            dt = 'F64'; b = v.tobytes()
        elif v.dtype == np.int32:
            dt = 'I32'; b = v.tobytes()
        elif v.dtype == np.uint16:  # raw bf16 bits
            dt = 'BF16'; b = v.tobytes()
        else:
            raise ValueError(v.dtype)
        hdr[k] = {'dtype': dt, 'shape': list(v.shape), 'data_offsets': [off, off + len(b)]}
        off += len(b)
        bufs.append(b)
    h = json.dumps(hdr).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in bufs:
            f.write(b)
