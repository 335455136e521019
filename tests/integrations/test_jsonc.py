"""JSON with comments, read and edited in place (pmem.integrations.jsonc)."""

from __future__ import annotations

import json

import pytest

from pmem.integrations import jsonc

TEXT = """\
// top
{
  "a": 1, // one
  /* block
     comment */
  "b": [1, 2, 3],
  "c": {
    "d": "x" // dee
  }
}
"""


def test_reads_comments_and_refuses_what_strip_json_comments_and_json_parse_refuse():
    assert jsonc.loads(TEXT) == {"a": 1, "b": [1, 2, 3], "c": {"d": "x"}}
    assert jsonc.loads('{"url": "http://x/*not a comment*/"}') == {"url": "http://x/*not a comment*/"}
    cases = [('{"a": 1,}', "comma before the closing bracket: line 1 column 9"), ('{"a": 1} // x', "line 1"),
             ('{"a": /* open', "never ends"), ('{"a": NaN}', "expected a value"), ("[1 2]", "expected ','")]
    for bad, where in cases:
        with pytest.raises(jsonc.JSONCError, match=where):
            jsonc.loads(bad, comments=not bad.endswith("// x"))


def test_edit_changes_only_what_it_must():
    new = jsonc.loads(TEXT)
    new["c"]["e"] = [True]
    new["b"].append(4)
    out = jsonc.edit(TEXT, new)
    assert jsonc.loads(out) == new
    for kept in ("// top", "// one", "/* block\n     comment */", "// dee"):
        assert kept in out
    assert out.startswith('// top\n{\n  "a": 1, // one\n')
    assert jsonc.edit(out, jsonc.loads(TEXT)) == TEXT  # and back, byte for byte


@pytest.mark.parametrize("remove", ["a", "b", "c"])
def test_removing_a_member_takes_its_line_and_comma_only(remove):
    new = {k: v for k, v in jsonc.loads(TEXT).items() if k != remove}
    out = jsonc.edit(TEXT, new)
    assert jsonc.loads(out) == new
    assert "// top" in out and "/* block" in out
    assert (f'"{remove}"' in out) is False


def test_one_line_and_empty_containers():
    assert jsonc.edit('{"a":1}', {"a": 1, "b": 2}) == '{"a":1, "b": 2}'
    assert jsonc.edit('{"a": [1, 2]}', {"a": [2]}) == '{"a": [2]}'
    assert json.loads(jsonc.edit("{}", {"hooks": {}})) == {"hooks": {}}
    assert jsonc.edit("", {"x": 1}) == '{\n  "x": 1\n}\n'
    tabs = '{\n\t"a": {\n\t\t"b": 1\n\t}\n}\n'
    assert jsonc.edit(tabs, {"a": {"b": 1, "c": 2}}) == '{\n\t"a": {\n\t\t"b": 1,\n\t\t"c": 2\n\t}\n}\n'


def test_hostile_settings_are_refused_with_one_line(tmp_path):
    from pmem.errors import UsageError
    from pmem.integrations import clients

    with pytest.raises(jsonc.JSONCError, match="nested too deeply"):
        jsonc.loads("[" * 100_000 + "]" * 100_000)
    path = clients.settings_path("gemini", home=tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{"hooks": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(UsageError, match="nested too deeply"):
        clients.install_hooks("gemini", home=tmp_path)
    path.write_text('{"a": "' + "x" * 6_000_000 + '"}')
    with pytest.raises(UsageError, match="larger than"):
        clients.install_hooks("gemini", home=tmp_path)
