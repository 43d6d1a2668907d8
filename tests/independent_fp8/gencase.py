"""Write a random MoE case (format 1, bf16 inputs, given routing + dy) with chosen value-range features."""
import json, numpy as np, st
from fmt import bf16_bits, bf16

PROFILES = ['normal', 'bigrows', 'tinyblocks', 'zeroblocks', 'tiny', 'huge', 'mixed']


def make(path, T, H, I, E, k, seed, profile='normal', recipe='fp8-block'):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, H)).astype(np.float32)
    w13 = (rng.standard_normal((E, 2 * I, H)) / np.sqrt(H)).astype(np.float32)
    w2 = (rng.standard_normal((E, H, I)) / np.sqrt(I)).astype(np.float32)
    dy = rng.standard_normal((T, H)).astype(np.float32)
    p = profile if profile != 'mixed' else rng.choice(PROFILES[:-1])
    if p == 'bigrows' or profile == 'mixed':
        r = rng.choice(T, max(1, T // 10), replace=False)
        x[r] *= np.float32(2.0 ** rng.integers(5, 40))
        w13[rng.integers(E), rng.integers(2 * I)] *= np.float32(2.0 ** 12)
        dy[rng.choice(T, max(1, T // 10), replace=False)] *= np.float32(2.0 ** 15)
    if p == 'tinyblocks' or profile == 'mixed':
        for _ in range(max(1, T // 8)):
            t = rng.integers(T); c = rng.integers(-(-H // 128)) * 128
            x[t, c:c + 128] *= np.float32(10.0 ** -rng.integers(4, 9))
        e = rng.integers(E)
        w13[e, :128, :128] *= np.float32(1e-6)
        w2[rng.integers(E), :, :min(I, 128)] *= np.float32(3e-5)
    if p == 'zeroblocks' or profile == 'mixed':
        for _ in range(max(1, T // 8)):
            t = rng.integers(T); c = rng.integers(-(-H // 128)) * 128
            x[t, c:c + 128] = 0
        w13[rng.integers(E), -128:, :128] = 0
        w2[rng.integers(E), :128, :] = 0
        dy[rng.integers(T)] = 0
        x[:, rng.integers(H)] = 0  # a zero channel (wgrad column block with amax 0 where an expert's rows all zero)
    if p == 'tiny':
        x *= np.float32(2.0 ** -40); dy *= np.float32(2.0 ** -30)
    if p == 'huge':
        x *= np.float32(2.0 ** 30); dy *= np.float32(2.0 ** 8)
    ids = np.full((T, k), -1, np.int32)
    for t in range(T):
        ids[t] = rng.choice(E, k, replace=False)
    if rng.random() < 0.4:  # unused slots
        ids[rng.random((T, k)) < 0.2] = -1
    if rng.random() < 0.4 and E > 2:  # an empty expert
        ids[ids == E - 1] = -1
    w = rng.random((T, k)).astype(np.float32)
    w = w / w.sum(1, keepdims=True)
    if rng.random() < 0.3:
        w *= np.float32(2.5)
    cfg = dict(tokens=T, hidden=H, intermediate=I, experts=E, top_k=k, activation='swiglu', routing=None,
               recipe=recipe, ep_ranks=1)
    tens = {'x': bf16_bits(x), 'w13': bf16_bits(w13), 'w2': bf16_bits(w2), 'topk_ids': ids,
            'topk_weights': bf16_bits(w), 'dy': bf16_bits(dy)}
    st.write(path, tens, {'moe.format': '1', 'moe.config': json.dumps(cfg), 'audit.profile': str(p),
                          'audit.seed': str(seed)})
    return cfg
