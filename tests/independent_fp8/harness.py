"""What scenarios.py and sweep.py share: the model's candidate for a case, and check's table read back."""
import kernel
import st


def write_candidate(cand, case, meta, recipe, mode, **variant):
    """Run the model on `case` (st.read's tensors and metadata) and write its candidate to `cand`;
    `variant` as kernel.moe takes it (bug=, q448=, qdiv=)."""
    out, _ = kernel.moe(case, recipe, mode, **variant)
    st.write(cand, out, {"moe.format": "1", "moe.config": meta["moe.config"]})


def check_table(stdout):
    """(tensor, verdict, err/bound) for each row of `moe-oracle check`'s table."""
    rows = []
    for line in stdout.splitlines()[2:]:
        w = line.split()
        if len(w) >= 6 and w[1] in ("pass", "FAIL"):
            rows.append((w[0], w[1], float(w[3])))
    return rows
