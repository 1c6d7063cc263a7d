"""Candidate, BuildResult and BuildSummary through engine.jsonable: what is written stays byte-for-byte what their
hand-written to_json methods wrote (GOLDEN, taken from the old code before the change), what is read back is the
same instance, and the old readers' leniencies hold ("" as a path is None; a partial BuildSummary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.candidates import Candidate
from engine.errors import DataError
from engine.harness.build.result import BuildResult, BuildSummary


def samples():
    c = Candidate("native", {"kernel.cu": "__global__ void k() {}\n", "binding.cpp": "// é\n", "inc/x.cuh": ""},
                  "cand-1", {"proposer": "llm", "parents": ["abc", "def"], "score": 1.5, "note": None})
    br = BuildResult(True, "native", "0123456789abcdef", "kb_0123", Path("/cache/kb_0123.so"), 12.5, False,
                     "nvcc: warning", None, None, "pch rebuilt", {"nvcc": 9.25, "link": 0.5}, True, "tc-1",
                     Path("/cache/entries/0123"))
    br2 = BuildResult(False, "kernelbench", "ffff", None, None, 0.25, failure="compile", error="x.cu:3: error")
    bs = BuildSummary(True, None, "tail", 3.5, True, {"nvcc": 1.0})
    bs2 = BuildSummary(False, "died")
    return [c, br, br2, bs, bs2]


GOLDEN = [
    "{\"format\": \"native\", \"files\": {\"kernel.cu\": \"__global__ void k() {}\\n\", \"binding.cpp\": \"// \\u00e9\\n\", \"inc/x.cuh\": \"\"}, \"name\": \"cand-1\", \"meta\": {\"proposer\": \"llm\", \"parents\": [\"abc\", \"def\"], \"score\": 1.5, \"note\": null}}",  # noqa: E501
    "{\"ok\": true, \"format\": \"native\", \"source_hash\": \"0123456789abcdef\", \"module_name\": \"kb_0123\", \"so_path\": \"/cache/kb_0123.so\", \"seconds\": 12.5, \"cache_hit\": false, \"log\": \"nvcc: warning\", \"error\": null, \"failure\": null, \"note\": \"pch rebuilt\", \"steps\": {\"nvcc\": 9.25, \"link\": 0.5}, \"pch_used\": true, \"toolchain_key\": \"tc-1\", \"entry_dir\": \"/cache/entries/0123\"}",  # noqa: E501
    "{\"ok\": false, \"format\": \"kernelbench\", \"source_hash\": \"ffff\", \"module_name\": null, \"so_path\": null, \"seconds\": 0.25, \"cache_hit\": false, \"log\": \"\", \"error\": \"x.cu:3: error\", \"failure\": \"compile\", \"note\": null, \"steps\": {}, \"pch_used\": null, \"toolchain_key\": \"\", \"entry_dir\": null}",  # noqa: E501
    "{\"ok\": true, \"error\": null, \"log\": \"tail\", \"seconds\": 3.5, \"cache_hit\": true, \"steps\": {\"nvcc\": 1.0}}",  # noqa: E501
    "{\"ok\": false, \"error\": \"died\", \"log\": \"\", \"seconds\": null, \"cache_hit\": false, \"steps\": {}}",
]


@pytest.mark.parametrize("i", range(len(GOLDEN)))
def test_json_unchanged_and_round_trips(i):
    obj = samples()[i]
    assert json.dumps(obj.to_json()) == GOLDEN[i]
    assert type(obj).from_json(json.loads(GOLDEN[i])) == obj


def test_old_readers_leniencies_kept():
    d = json.loads(GOLDEN[1])
    back = BuildResult.from_json({**d, "so_path": "", "entry_dir": ""})
    assert back.so_path is None and back.entry_dir is None
    del d["entry_dir"]
    assert BuildResult.from_json(d).entry_dir is None
    assert BuildSummary.from_json({}) == BuildSummary(False)
    assert BuildSummary.from_json({"ok": True, "log": None, "steps": None, "seconds": 2}) == BuildSummary(True, seconds=2.0)
    assert Candidate.from_json({"format": "native", "files": {"kernel.cu": ""}, "meta": None}) == \
        Candidate("native", {"kernel.cu": ""})


def test_bad_data_names_what():
    with pytest.raises(DataError, match="a candidate"):
        Candidate.from_json({"files": {}})
    with pytest.raises(DataError, match="a build result"):
        BuildResult.from_json({"ok": True})
