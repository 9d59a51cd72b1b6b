"""`kprotocol report` scales with groups, not records: a group's charts are aggregates (rebalances per time
bin, durations per logarithmic bin, the timeline of its latest rebalances), its tables the latest and
the worst rebalances; past 25 groups each group is a page of its own, linked from the overview."""

from __future__ import annotations

import re
import time
from pathlib import Path

from kprotocol.pipeline.report import LISTED, WORST, write_report
from kprotocol.pipeline.synthetic import write_fleet


def _marks(page: str) -> int:
    return len(re.findall(r"<(?:circle|rect|path) ", page))


def test_a_group_of_thousands_of_rebalances_draws_aggregates(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    write_fleet(str(small), groups=1, rebalances=200)
    write_fleet(str(large), groups=1, rebalances=5000)
    pages = {}
    for out in (small, large):
        start = time.perf_counter()
        write_report(str(out), out / "report.html")
        assert time.perf_counter() - start < 15
        pages[out] = (out / "report.html").read_text()
    page = pages[large]
    assert "5,000 rebalance(s)" in page
    # The same number of marks for 25 times the rebalances (bins and the latest window, not records).
    assert _marks(page) <= _marks(pages[small]) + 60 < 400
    assert page.count("<tr>") <= 1 + (LISTED + 1) + 2 * (WORST + 1) + 8 + 3
    assert "The 10 longest" in page and "rebalance durations" in page and "rebalances per" in page


def test_past_25_groups_each_group_is_a_page(tmp_path: Path) -> None:
    write_fleet(str(tmp_path), groups=30, rebalances=20)
    target = tmp_path / "report.html"
    names = write_report(str(tmp_path), target)
    assert len(names) == 30
    page = target.read_text()
    links = re.findall(r"href='(report-groups/[^']+\.html)'", page)
    assert len(links) == 30 and all((tmp_path / link).exists() for link in links)
    assert "<svg" not in page  # the overview only
    assert "members over time" in (tmp_path / links[0]).read_text()
