"""The models section's report: the share of stock's time in the modules
tierkit replaces, beside each cell's paired speed-up (#54 goal 5), from
rows as the probe writes them (no model is built here)."""

from tierkit.bench.sections import models


def _row(impl, cell="prefill", how="eager", **extra):
    return {
        "section": "models", "model": "llama-0.5b", "cell": cell, "how": how, "impl": impl,
        "dtype": "bfloat16", "median_s": 0.8, "min_s": 0.7, "max_s": 0.9, "ours_over_theirs": 1.06, **extra,
    }  # fmt: skip


def _results(rows):
    return {"sections": {"models": {"rows": rows, "skipped": None, "seconds": 1.0}}}


def test_the_share_table_reads_the_stock_rows():
    rows = [
        _row("stock", replaced_share=0.18, norms_share=0.15, norms_speedup=1.7),
        _row("patched"),
        _row("stock", cell="decode", replaced_share=0.02, norms_share=0.013, norms_speedup=None),
        _row("patched", cell="decode"),
    ]
    text = "\n".join(models.markdown(_results(rows)))
    assert "| llama-0.5b | prefill | bfloat16 | 18.0 % | 15.0 % | 1.70x |" in text
    assert "| llama-0.5b | decode | bfloat16 | 2.0 % | 1.3 % | — |" in text
    assert "rotary runs inside attention and is not separated" in text


def test_no_share_table_without_shares():
    # Compiled cells (and older results) carry no share: no empty table.
    rows = [_row("stock", how="compiled"), _row("patched", how="compiled")]
    text = "\n".join(models.markdown(_results(rows)))
    assert "stock's time in replaced modules" not in text
    targets = models.targets(_results(rows))
    assert any(
        "llama-0.5b prefill patched vs stock, compiled, bfloat16 >= 1.0x" == t["target"] for t in targets
    )


def test_the_pairs_column_counts_each_cells_pairs_and_older_results_have_none():
    rows = [_row("stock", pairs=19), _row("patched", pairs=19)]
    text = "\n".join(models.markdown(_results(rows)))
    assert "| patched's speed-up | pairs |" in text
    assert text.count("| 1.06x | 19 |") == 1  # the stock row's line, its patched peer beside it
    assert "full runs give a cell as many as fit in 0.6 s" in text
    older = "\n".join(models.markdown(_results([_row("stock"), _row("patched")])))
    assert "pairs" not in older  # a report rendered from results without counts reads as before
