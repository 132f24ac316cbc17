"""The user's words on every shared transcript at 32k and 128k: the first real ask and the newest asks within the
user budget verbatim after every compaction, and the rules the user stated (read by tests/user_words.py's oracle)."""

from __future__ import annotations

import pytest
from tests.conftest import RAW, raw_files
from tests.user_words import KINDS, Tally, measure

# Rules a squeezed (overflow) compaction drops from Constraints cannot come back while the summarizer has no
# reader of the archive, and a rule longer than a list item is clipped there: at 32k, 91.2% are kept (issue 21
# asks for 100%: restoring from the archive is the missing part). The floor catches any further loss.
RULES_FLOOR = {32_000: 91.0, 128_000: 100.0}


@pytest.mark.parametrize("window", [32_000, 128_000])
def test_the_first_and_newest_asks_and_the_rules_are_kept_verbatim(window: int) -> None:
    files = [p for p in raw_files() if p.exists()]
    if not files:
        pytest.skip(f"no transcripts in {RAW}")
    total = Tally()
    for path in files:
        total.add(measure(path, window))
    assert total.wanted["first"] and total.wanted["newest"] and total.wanted["rules"]
    shares = {k: round(total.share(k), 1) for k in KINDS}
    assert shares["first"] == 100.0 and shares["newest"] == 100.0, (shares, total.missed[:5])
    assert shares["rules"] >= RULES_FLOOR[window], (shares, total.missed[:5])
