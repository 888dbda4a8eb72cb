"""keys.POLICY_FLAGS, read off exec_options.EXEC_OPTIONS' "flags" rows,
names each command-line flag that feeds the policy once (issue 24 item 3):
the flag, the ``Flags`` field that is its ``exec`` option's dest, the policy
key. The flags' layer and the flag named in an error message are derived
from it, so a flag added to EXEC_OPTIONS with its key is complete."""

from __future__ import annotations

from safebox.cli import EXEC_OPTIONS
from safebox.policy.keys import POLICY_FLAGS
from safebox.policy.load import Flags, flags_layer
from safebox.policy.validate import FLAG_FOR_KEY


def test_every_flags_field_is_in_the_table_once_with_the_exec_option_whose_dest_it_is() -> None:
    fields = [field for _, field, _ in POLICY_FLAGS]
    assert sorted(fields) == sorted(Flags.__fields__)
    assert len(set(fields)) == len(fields)
    option = {o.long: o.dest for o in EXEC_OPTIONS}
    assert {flag: option.get(flag) for flag, _, _ in POLICY_FLAGS} == {flag: field for flag, field, _ in POLICY_FLAGS}


def test_each_flag_given_alone_writes_its_key_and_nothing_else() -> None:
    for flag, field, key in POLICY_FLAGS:
        value = True if field == "strict" else "all" if field == "allow_gpu" else "1" if field.startswith(
            ("limit_", "timeout")) else ("x.com",)
        data = flags_layer(Flags(**{field: value})).data
        path: tuple[str, ...] = ()
        node = data
        while isinstance(node, dict):
            (name,) = node
            path, node = (*path, name), node[name]
        assert path == key, flag
        assert FLAG_FOR_KEY[key] == flag


def test_flags_not_given_add_nothing() -> None:
    assert flags_layer(Flags()).data == {}


def test_only_the_rows_that_feed_the_policy_name_a_key_and_each_key_is_one_the_model_reads() -> None:
    from safebox.policy.keys import LIST_KEYS, SCALAR_KEYS

    for o in EXEC_OPTIONS:
        assert bool(o.key) == ("flags" in o.into), o.long
    known = set(LIST_KEYS) | set(SCALAR_KEYS) | {("limits", "processes"), ("limits", "memory"),
                                                 ("limits", "tmpSize"), ("limits", "wallTime")}
    assert {key for _, _, key in POLICY_FLAGS} <= known
