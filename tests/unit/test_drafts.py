"""Speculative drafts (sglang_layout/drafts.py): declared once, named by a layout or a grid, rendered as SGLang's flags."""

from __future__ import annotations

import pytest

from sglang_layout import command
from sglang_layout.candidates import expand, parse_grid
from sglang_layout.drafts import parse_drafts
from sglang_layout.errors import DeclarationError
from sglang_layout.schema import parse_layouts

DRAFTS = {
    "eagle3": {
        "path": "/srv/models/Kimi-K2.6-EAGLE3",
        "algorithm": "EAGLE3",
        "args": {"speculative-num-steps": 3, "speculative-num-draft-tokens": 4},
        "source": "huggingface",
        "hf_repo": "org/draft",
    }
}


def test_a_layout_naming_a_draft_runs_with_its_flags_under_its_own_args():
    layouts = parse_layouts(
        {"ep8-eagle3": {"tp": 8, "ep": 8, "draft": "eagle3", "args": {"speculative-num-steps": 5}}, "ep8": {"tp": 8, "ep": 8}},
        drafts=parse_drafts(DRAFTS),
    )
    drafted = layouts["ep8-eagle3"]
    assert drafted.draft == "eagle3" and layouts["ep8"].draft == ""
    argv = command.server_args(drafted, model_path="/srv/models/m", port=30000, host="127.0.0.1")
    text = " ".join(argv)
    assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path /srv/models/Kimi-K2.6-EAGLE3" in text
    assert "--speculative-num-steps 5" in text and "--speculative-num-draft-tokens 4" in text  # the layout's value wins
    assert "speculative" not in " ".join(command.server_args(layouts["ep8"], model_path="/m", port=1, host="h"))


@pytest.mark.parametrize(
    ("drafts", "layout", "message"),
    [
        ({}, {"tp": 8, "draft": "eagle3"}, r"sglang_layouts\.x\.draft.*not declared in sglang_draft_models.*declared: none"),
        (
            DRAFTS,
            {"tp": 8, "draft": "eagle3", "args": {"speculative-draft-model-path": "/tmp/other"}},
            "set by the layout's draft",
        ),
        (DRAFTS, {"tp": 8, "draft": "eagle3", "args": {"speculative-algorithm": "NGRAM"}}, "set by the layout's draft"),
        ({"e": {"path": "relative/path", "algorithm": "EAGLE3"}}, {"tp": 8, "draft": "e"}, r"sglang_draft_models\.e\.path"),
        ({"e": {"path": "/m", "algorithm": "EAGLE3 --port 1"}}, {"tp": 8}, r"sglang_draft_models\.e\.algorithm"),
        ({"e": {"path": "/m", "algorithm": "EAGLE3", "source": "ftp"}}, {"tp": 8}, r"sglang_draft_models\.e\.source"),
        ({"e": {"path": "/m", "algorithm": "EAGLE3", "url": "x"}}, {"tp": 8}, r"sglang_draft_models\.e\.url.*not a draft field"),
        ({"e": {"path": "/m", "algorithm": "EAGLE3", "args": {"port": 1}}}, {"tp": 8, "draft": "e"}, r"args\.port"),
    ],
)
def test_bad_drafts_and_draft_clashes_are_refused_naming_the_field(drafts, layout, message):
    with pytest.raises(DeclarationError, match=message):
        parse_layouts({"x": layout}, drafts=parse_drafts(drafts))


def test_a_grid_tries_a_draft_by_name_and_none_is_the_layout_without_one():
    name, values = parse_grid("draft=eagle3,none")
    assert (name, values) == ("draft", ("eagle3", None))
    with_draft, without = expand({"ep8": {"tp": 8, "ep": 8, "draft": "eagle3"}}, None, [(name, values)])
    assert with_draft.entry["draft"] == "eagle3" and "draft" not in without.entry
    layouts = parse_layouts({c.name: c.entry for c in (with_draft, without)}, drafts=parse_drafts(DRAFTS))
    assert layouts[with_draft.name].draft == "eagle3" and layouts[without.name].draft == ""
    assert "speculative-algorithm" not in layouts[without.name].args
