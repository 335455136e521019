"""Keys, sealed files and the clock: what the remote may hold and how a wrong key is caught."""

from __future__ import annotations

import pytest

from pmem.errors import UsageError
from pmem.hlc import Clock, undo_key
from pmem.sync import keys


def test_a_sealed_changeset_opens_only_as_itself():
    key = keys.new_key()
    blob = keys.seal(key, "aaaaaaaaaaaaaaaa", 3, {"ops": [{"text": "the cabin code is 4411"}]})
    assert b"4411" not in blob and b"cabin" not in blob
    assert keys.open_sealed(key, blob, "aaaaaaaaaaaaaaaa", 3, "x") == {"ops": [{"text": "the cabin code is 4411"}]}
    with pytest.raises(keys.SyncError, match="moved or tampered"):  # renamed to another seq
        keys.open_sealed(key, blob, "aaaaaaaaaaaaaaaa", 4, "x")
    with pytest.raises(keys.WrongKey):
        keys.open_sealed(keys.new_key(), blob, "aaaaaaaaaaaaaaaa", 3, "x")
    # the header is authenticated: editing it (here the seq, to pass the check above) breaks the seal
    forged = blob.replace(b'"seq": 3', b'"seq": 4')
    with pytest.raises(keys.SyncError, match="fails authentication"):
        keys.open_sealed(key, forged, "aaaaaaaaaaaaaaaa", 4, "x")


def test_the_key_check_tells_a_wrong_key():
    key = keys.new_key()
    check = keys.seal_keycheck(key)
    keys.check_key(key, check)
    with pytest.raises(keys.WrongKey, match="nothing was written"):
        keys.check_key(keys.new_key(), check)


def test_key_text_round_trips_and_key_files_are_private(tmp_path):
    key = keys.new_key()
    assert keys.decode_key(keys.encode_key(key)) == key
    assert keys.decode_key(keys.encode_key(key).upper().replace("-", " ")) == key
    with pytest.raises(UsageError):
        keys.decode_key("not a key")
    path = tmp_path / "k"
    keys.write_key_file(path, key)
    assert path.stat().st_mode & 0o777 == 0o600
    assert keys.read_key_file(path) == key
    with pytest.raises(keys.SyncError, match="already exists"):
        keys.write_key_file(path, keys.new_key())


def test_a_passphrase_wraps_the_key():
    key = keys.new_key()
    blob = keys.wrap_key(key, "correct horse")
    assert key not in blob
    assert keys.unwrap_key(blob, "correct horse") == key
    with pytest.raises(keys.WrongKey):
        keys.unwrap_key(blob, "wrong horse")


def test_clock_keys_sort_by_time_then_counter_then_device():
    a, b = Clock("a" * 16), Clock("b" * 16)
    k1 = a.tick(1000)
    k2 = a.tick(1000)  # same millisecond: the counter orders them
    k3 = a.tick(500)  # a wall clock that went back never goes back in keys
    assert k1 < k2 < k3
    b.observe(k3)
    assert b.tick(10) > k3  # after seeing a's change, b's next one sorts later
    # an undo sorts just above the value it reverts and below anything written after it
    u = undo_key(k1, b.tick(10))
    assert k1 < u < k2
