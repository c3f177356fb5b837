"""A string a peer sent that UTF-8 cannot encode (a lone surrogate from a JSON ``\\ud800``
escape, or CESU bytes ``json.loads`` reads with ``surrogatepass``) never fails a row:
found by the secret-gate property test (a CONNECT ``name`` of ``b"\\xed\\xa0\\x80x"``,
which nats-server accepts, ended the run with a SchemaError)."""

from __future__ import annotations

from dissectors.nats import parser
from dissectors.nats.table import NATS_TABLE as NATS
from dissectors.schema import rows_to_batch


def test_lone_surrogates_become_replacement_characters() -> None:
    batch = rows_to_batch(NATS, [{"client_name": "\ud800x"}, {"client_name": "ok"},
                                 {"connect_urls": ["a\udfffb", "c"]}])
    assert batch.column("client_name").to_pylist() == ["\ufffd\ufffd\ufffdx", "ok", None]
    assert batch.column("connect_urls").to_pylist()[2] == ["a\ufffd\ufffd\ufffdb", "c"]


def test_a_connect_name_with_cesu_bytes_is_a_row() -> None:
    values, _problems = parser.parse_connect(b'{"verbose":true,"name":"\xed\xa0\x80x"}')
    batch = rows_to_batch(NATS, [{k: v for k, v in values.items() if k != "op"}])
    assert batch.column("client_name").to_pylist() == ["\ufffd\ufffd\ufffdx"]
