"""ACL types, filters, creation checks and the StandardAuthorizer, with the cases of Kafka's
StandardAuthorizerTest and a property test of the prefix index against a plain scan."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kesque.errors import ErrorCode
from kesque.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    creation_error,
    deletion_filter_error,
    has_unknown_code,
    parse_enum,
    pascal_name,
)
from kesque.security.authorizer import AuthorizerNotReady, StandardAcl, StandardAuthorizer
from kesque.security.principal import KafkaPrincipal

Op, Perm, PT, RT = AclOperation, AclPermissionType, PatternType, ResourceType
TOPIC, GROUP, LITERAL, PREFIXED = RT.TOPIC, RT.GROUP, PT.LITERAL, PT.PREFIXED
ALLOW, DENY = Perm.ALLOW, Perm.DENY
LOCAL = "127.0.0.1"


def user(name):
    return KafkaPrincipal("User", name)


def authorizer_with(*acls, **kw):
    a = StandardAuthorizer(**kw)
    for i, acl in enumerate(acls):
        a.add_acl(i, acl)
    return a


def check(a, who, actions, host=LOCAL):
    return [a.authorize_action(user(who), host, op, rt, name) for op, rt, name in actions]


def foo_acl(op, perm):
    return StandardAcl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, perm)


def bar_acl(op, perm):
    return StandardAcl(GROUP, "bar", LITERAL, "User:*", "*", op, perm)


# -- the types -------------------------------------------------------------------------------


def test_codes_are_kafkas():
    assert [o.name for o in Op][-4:] == ["IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS", "TWO_PHASE_COMMIT"]
    assert (RT.USER, PT.PREFIXED, Perm.ALLOW, Op.TWO_PHASE_COMMIT) == (7, 4, 3, 15)
    assert RT.from_code(42) is RT.UNKNOWN and Op.from_code(99) is Op.UNKNOWN and PT.from_code(3) is LITERAL
    assert (
        pascal_name(RT.TRANSACTIONAL_ID) == "TransactionalId" and pascal_name(Op.DESCRIBE_CONFIGS) == "DescribeConfigs"
    )
    assert parse_enum(RT, "Topic") is TOPIC and parse_enum(RT, "TRANSACTIONALID") is RT.TRANSACTIONAL_ID
    assert parse_enum(Op, "idempotent_write") is Op.IDEMPOTENT_WRITE
    with pytest.raises(ValueError):
        parse_enum(Op, "Fly")


def binding(rt=TOPIC, name="t", pt=LITERAL, principal="User:a", host="*", op=Op.READ, perm=ALLOW):
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


def test_resource_pattern_filter_matches_as_kafkas():
    lit, pre, wild = binding(name="foo").pattern, binding(name="fo", pt=PREFIXED).pattern, binding(name="*").pattern
    any_ = ResourcePatternFilter()
    assert all(any_.matches(p) for p in (lit, pre, wild))
    assert not ResourcePatternFilter(GROUP).matches(lit)
    # a specific pattern type and a name: that exact pattern only
    assert ResourcePatternFilter(TOPIC, "foo", LITERAL).matches(lit)
    assert not ResourcePatternFilter(TOPIC, "foo", LITERAL).matches(wild)
    assert not ResourcePatternFilter(TOPIC, "foo", PREFIXED).matches(pre)
    # ANY with a name: equal names of any pattern type
    assert ResourcePatternFilter(TOPIC, "fo", PT.ANY).matches(pre) and not ResourcePatternFilter(
        TOPIC, "f", PT.ANY
    ).matches(pre)
    # MATCH: every pattern that applies to the resource
    match = ResourcePatternFilter(TOPIC, "foo", PT.MATCH)
    assert match.matches(lit) and match.matches(pre) and match.matches(wild)
    assert not match.matches(binding(name="foobar").pattern)
    assert not match.matches(binding(name="foox", pt=PREFIXED).pattern)
    assert ResourcePatternFilter(TOPIC, "foo", PT.MATCH).find_indefinite_field() == "Resource pattern type is MATCH."
    assert ResourcePatternFilter(TOPIC, "foo", LITERAL).find_indefinite_field() is None


def test_entry_filter_and_binding_filter():
    e = binding(principal="User:a", host="h", op=Op.WRITE, perm=DENY).entry
    assert AccessControlEntryFilter().matches(e)
    assert AccessControlEntryFilter("User:a", "h", Op.WRITE, DENY).matches(e)
    assert not AccessControlEntryFilter("User:b").matches(e)
    assert not AccessControlEntryFilter(host="*").matches(e)
    assert not AccessControlEntryFilter(operation=Op.ALL).matches(e)  # a filter's ALL is no wildcard
    assert not AccessControlEntryFilter(permission_type=ALLOW).matches(e)
    f = AclBindingFilter(
        ResourcePatternFilter(TOPIC, "t", LITERAL), AccessControlEntryFilter("User:a", "*", Op.READ, ALLOW)
    )
    assert f.matches(binding()) and f.matches_at_most_one()
    assert AclBindingFilter.ANY.find_indefinite_field() == "Resource type is ANY."
    assert AclBindingFilter(ResourcePatternFilter(TOPIC, "t", LITERAL)).find_indefinite_field() == "Principal is NULL"
    assert AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=Op.UNKNOWN)).is_unknown


@pytest.mark.parametrize(
    ("b", "message"),
    [
        (binding(rt=RT.CLUSTER, name="c"), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (binding(name=""), "Invalid empty resource name"),
        (binding(rt=RT.ANY), "Invalid resourceType ANY"),
        (binding(rt=RT.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (binding(pt=PT.MATCH), "Invalid patternType MATCH"),
        (binding(pt=PT.ANY), "Invalid patternType ANY"),
        (binding(op=Op.ANY), "Invalid operation ANY"),
        (binding(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (binding(perm=Perm.ANY), "Invalid permissionType ANY"),
    ],
)
def test_creation_errors(b, message):
    err = creation_error(b)
    assert err.code == ErrorCode.invalid_request and err.message == message


def test_valid_creations_and_deletion_filters():
    assert creation_error(binding()) is None
    assert creation_error(binding(rt=RT.CLUSTER, name=CLUSTER_NAME, op=Op.ALTER)) is None
    assert creation_error(binding(name="*", pt=PREFIXED, op=Op.ALL, perm=DENY)) is None
    assert deletion_filter_error(AclBindingFilter.ANY) is None
    err = deletion_filter_error(AclBindingFilter(ResourcePatternFilter(RT.from_code(9))))
    assert (err.code, err.message) == (ErrorCode.invalid_request, "Unknown patternFilter.")
    err = deletion_filter_error(AclBindingFilter(entry_filter=AccessControlEntryFilter(operation=Op.from_code(77))))
    assert err.message == "Unknown entryFilter."
    # a code 0 does not even parse in Kafka (the connection closes); other unknown codes do
    assert has_unknown_code(2, 3, 0, 3) and not has_unknown_code(9, 3, 3, 3)


# -- the authorizer: Kafka's StandardAuthorizerTest cases --------------------------------------


def test_config_super_users_and_default():
    a = StandardAuthorizer.from_config(
        {"super.users": " User:alice ; ;User:chris", "allow.everyone.if.no.acl.found": "TRUE"}
    )
    assert a.super_users == {"User:alice", "User:chris"} and a.allow_everyone_if_no_acl_found
    assert not StandardAuthorizer.from_config({}).allow_everyone_if_no_acl_found
    with pytest.raises(ValueError, match="principalType:principalName"):
        StandardAuthorizer.from_config({"super.users": "alice"})


@pytest.mark.parametrize("allow_everyone", [True, False])
def test_allow_everyone_if_no_acl_found(allow_everyone):
    a = authorizer_with(
        StandardAcl(TOPIC, "topic1", LITERAL, "User:Alice", "*", Op.READ, ALLOW),
        super_users={"User:alice"},
        allow_everyone_if_no_acl_found=allow_everyone,
    )
    assert check(a, "Bob", [(Op.READ, TOPIC, "topic1"), (Op.READ, TOPIC, "topic2")]) == [False, allow_everyone]
    assert check(a, "alice", [(Op.DELETE, GROUP, "g")]) == [True]  # a super user


def test_implied_operations():
    for op in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert check(authorizer_with(foo_acl(op, ALLOW)), "bob", [(Op.DESCRIBE, TOPIC, "foo_bar")]) == [True]
    assert check(authorizer_with(foo_acl(Op.CREATE, ALLOW)), "bob", [(Op.DESCRIBE, TOPIC, "foo_bar")]) == [False]
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):  # a DENY implies nothing
        a = authorizer_with(
            foo_acl(op, DENY), StandardAcl(TOPIC, "foo_", PREFIXED, "User:bob", "*", Op.DESCRIBE, ALLOW)
        )
        assert check(a, "bob", [(Op.DESCRIBE, TOPIC, "foo_bar"), (op, TOPIC, "foo_bar")]) == [True, False]
    for op in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert check(authorizer_with(foo_acl(op, ALLOW)), "bob", [(Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")]) == [True]
    assert check(authorizer_with(foo_acl(Op.ALTER_CONFIGS, ALLOW)), "bob", [(Op.ALTER_CONFIGS, TOPIC, "foo_")]) == [
        True
    ]
    assert check(authorizer_with(foo_acl(Op.WRITE, ALLOW)), "bob", [(Op.DESCRIBE_CONFIGS, TOPIC, "foo_")]) == [False]


def test_principal_matching_and_simple_authorizations():
    a = authorizer_with(
        foo_acl(Op.READ, ALLOW),
        foo_acl(Op.WRITE, ALLOW),
        bar_acl(Op.DESCRIBE_CONFIGS, ALLOW),
        bar_acl(Op.ALTER_CONFIGS, ALLOW),
    )
    assert check(a, "bob", [(Op.READ, TOPIC, "foo_")]) == [True]
    assert check(a, "alice", [(Op.READ, TOPIC, "foo_")]) == [False]
    assert check(a, "fred", [(Op.ALTER_CONFIGS, GROUP, "bar")]) == [True]  # User:*
    assert check(authorizer_with(bar_acl(Op.READ, DENY)), "alice", [(Op.READ, GROUP, "bar")]) == [False]


def test_list_acls_in_kafkas_order():
    foo = [foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW)]
    bar = [bar_acl(Op.DESCRIBE_CONFIGS, DENY), bar_acl(Op.ALTER_CONFIGS, DENY)]
    a = authorizer_with(*foo, *bar)
    assert a.acls() == [x.to_binding() for x in (*foo, *bar)]
    a.remove_acl(1)
    assert a.acls() == [x.to_binding() for x in (foo[0], *bar)]
    assert a.acls(AclBindingFilter(ResourcePatternFilter(TOPIC, None, PT.ANY))) == [foo[0].to_binding()]
    # names sort in reverse, then pattern type, operation, principal, host, permission
    acls = [
        StandardAcl(TOPIC, "a", LITERAL, "User:x", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "b", PREFIXED, "User:x", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "b", LITERAL, "User:y", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "b", LITERAL, "User:x", "*", Op.WRITE, ALLOW),
        StandardAcl(TOPIC, "b", LITERAL, "User:x", "*", Op.READ, ALLOW),
    ]
    assert authorizer_with(*acls).acls() == [acls[i].to_binding() for i in (4, 2, 3, 1, 0)]
    assert authorizer_with(*acls).matching_ids(AclBindingFilter(ResourcePatternFilter(TOPIC, "b", PT.MATCH))) == [
        1,
        2,
        3,
        4,
    ]


def test_deny_precedence_with_operation_all():
    a = authorizer_with(
        StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.ALL, DENY),
        StandardAcl(TOPIC, "foo", PREFIXED, "User:alice", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, DENY),
        StandardAcl(TOPIC, "foo", PREFIXED, "User:*", "*", Op.DESCRIBE, ALLOW),
    )
    r, w, d = Op.READ, Op.WRITE, Op.DESCRIBE
    assert check(a, "alice", [(w, TOPIC, "foo"), (r, TOPIC, "foo"), (d, TOPIC, "foo"), (r, TOPIC, "foobar")]) == [
        False,
        False,
        False,
        True,
    ]
    assert check(
        a, "bob", [(d, TOPIC, "foo"), (r, TOPIC, "foo"), (w, TOPIC, "foo"), (d, TOPIC, "foobaz"), (r, TOPIC, "foobaz")]
    ) == [
        False,
        False,
        False,
        True,
        False,
    ]


def test_topic_acl_with_operation_all():
    a = authorizer_with(
        StandardAcl(TOPIC, "foo", LITERAL, "User:*", "*", Op.ALL, ALLOW),
        StandardAcl(TOPIC, "bar", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
        StandardAcl(TOPIC, "baz", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
    )
    assert check(
        a, "alice", [(Op.WRITE, TOPIC, "foo"), (Op.DESCRIBE_CONFIGS, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "baz")]
    ) == [True, True, False]
    assert check(a, "bob", [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "baz")]) == [
        True,
        False,
        True,
    ]
    assert check(a, "malory", [(Op.DESCRIBE, TOPIC, "foo"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")]) == [
        True,
        False,
        False,
    ]


def test_host_matching():
    h1, h2 = "192.168.1.1", "192.168.1.2"
    a = authorizer_with(
        StandardAcl(TOPIC, "foo", LITERAL, "User:alice", h1, Op.READ, DENY),
        StandardAcl(TOPIC, "foo", LITERAL, "User:alice", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "bar", LITERAL, "User:bob", h2, Op.READ, ALLOW),
        StandardAcl(TOPIC, "bar", LITERAL, "User:*", LOCAL, Op.DESCRIBE, ALLOW),
    )
    actions = [(Op.READ, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "bar")]
    assert check(a, "alice", actions, LOCAL) == [True, False, True]
    assert check(a, "alice", actions, h1) == [False, False, False]
    assert check(a, "alice", actions, h2) == [True, False, False]
    assert check(a, "bob", actions, LOCAL) == [False, False, True]
    assert check(a, "bob", actions, h1) == [False, False, False]
    assert check(a, "bob", actions, h2) == [False, True, True]


def test_many_acls_and_prefixes():
    a = authorizer_with(
        StandardAcl(TOPIC, "green2", LITERAL, "User:*", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "green", PREFIXED, "User:bob", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "betamax4", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "betamax", LITERAL, "User:bob", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "beta", PREFIXED, "User:*", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "alpha", PREFIXED, "User:*", "*", Op.READ, ALLOW),
        StandardAcl(TOPIC, "alp", PREFIXED, "User:bob", "*", Op.READ, DENY),
        StandardAcl(GROUP, "*", LITERAL, "User:bob", "*", Op.WRITE, ALLOW),
        StandardAcl(GROUP, "wheel", LITERAL, "User:*", "*", Op.WRITE, DENY),
    )
    assert check(a, "bob", [(Op.READ, TOPIC, "green1"), (Op.WRITE, GROUP, "wheel")]) == [True, False]
    assert check(a, "bob", [(Op.READ, TOPIC, "alpha"), (Op.WRITE, GROUP, "arbitrary"), (Op.READ, TOPIC, "ala")]) == [
        False,
        True,
        False,
    ]
    b = authorizer_with(
        StandardAcl(TOPIC, "fooa", PREFIXED, "User:alice", "*", Op.ALL, ALLOW),
        StandardAcl(TOPIC, "foobar", LITERAL, "User:bob", "*", Op.ALL, ALLOW),
        StandardAcl(TOPIC, "f", PREFIXED, "User:bob", "*", Op.ALL, ALLOW),
    )
    assert check(b, "bob", [(Op.WRITE, TOPIC, "foobarr"), (Op.READ, TOPIC, "goobar"), (Op.READ, TOPIC, "fooa")]) == [
        True,
        False,
        True,
    ]
    assert check(b, "alice", [(Op.DESCRIBE, TOPIC, "fooa"), (Op.WRITE, TOPIC, "bar"), (Op.READ, TOPIC, "baz")]) == [
        True,
        False,
        False,
    ]


def test_acls_on_other_principals_still_count_as_acls_on_the_resource():
    a = authorizer_with(
        StandardAcl(TOPIC, "t", PREFIXED, "User:x", "*", Op.READ, ALLOW), allow_everyone_if_no_acl_found=True
    )
    assert check(a, "y", [(Op.READ, TOPIC, "tt"), (Op.READ, TOPIC, "u")]) == [False, True]
    # the prefixed wildcard name is an ordinary prefix: it applies only to names starting with '*'
    a = authorizer_with(
        StandardAcl(TOPIC, "*", PREFIXED, "User:y", "*", Op.READ, ALLOW), allow_everyone_if_no_acl_found=True
    )
    assert check(a, "y", [(Op.READ, TOPIC, "*x"), (Op.READ, TOPIC, "x")]) == [True, True]
    assert check(a, "z", [(Op.READ, TOPIC, "*x"), (Op.READ, TOPIC, "x")]) == [False, True]


def test_the_server_seam_and_loading():
    a = authorizer_with(
        StandardAcl(TOPIC, "t", LITERAL, "User:a", "*", Op.WRITE, ALLOW),
        super_users={"User:root"},
        loading_complete=False,
    )
    ctx = SimpleNamespace(principal=user("a"), client_host=LOCAL)
    with pytest.raises(AuthorizerNotReady) as e:
        a.authorize(ctx, Op.WRITE, TOPIC, "t")
    assert e.value.code == ErrorCode.unknown_server_error
    assert a.authorize(SimpleNamespace(principal=user("root"), client_host=LOCAL), Op.WRITE, TOPIC, "t")
    a.complete_initial_load()
    assert a.authorize(ctx, Op.WRITE, TOPIC, "t") and not a.authorize(ctx, Op.READ, TOPIC, "t")


def test_add_remove_and_snapshot():
    acl = StandardAcl(TOPIC, "t", LITERAL, "User:a", "*", Op.WRITE, ALLOW)
    a = authorizer_with(acl)
    with pytest.raises(ValueError, match="already exists"):
        a.add_acl(0, StandardAcl(TOPIC, "u", LITERAL, "User:a", "*", Op.WRITE, ALLOW))
    with pytest.raises(ValueError, match="aclsByResource"):
        a.add_acl(1, acl)
    assert a.remove_acl(0) == acl and a.acl_count() == 0 and not a._sections[TOPIC].literal
    with pytest.raises(ValueError, match="not found"):
        a.remove_acl(0)
    # the groups found for a name are cached; a change of the ACLs drops them
    assert check(a, "a", [(Op.WRITE, TOPIC, "tx")]) == [False]
    a.add_acl(5, StandardAcl(TOPIC, "t", PREFIXED, "User:a", "*", Op.WRITE, ALLOW))
    assert check(a, "a", [(Op.WRITE, TOPIC, "tx")]) == [True]
    a.add_acl(6, StandardAcl(TOPIC, "tx", LITERAL, "User:*", "*", Op.ALL, DENY))
    assert check(a, "a", [(Op.WRITE, TOPIC, "tx")]) == [False]
    a.remove_acl(6)
    assert check(a, "a", [(Op.WRITE, TOPIC, "tx")]) == [True]
    a.remove_acl(5)
    assert check(a, "a", [(Op.WRITE, TOPIC, "tx")]) == [False]
    a.load_snapshot({"x": acl})
    assert a.acl_count() == 1 and check(a, "a", [(Op.WRITE, TOPIC, "t")]) == [True]


def test_authorize_by_resource_type():
    def by_type(a, who="alice", op=Op.WRITE):
        return a.authorize_by_resource_type(user(who), LOCAL, op, RT.TRANSACTIONAL_ID)

    tx = RT.TRANSACTIONAL_ID
    assert not by_type(authorizer_with())
    assert by_type(authorizer_with(allow_everyone_if_no_acl_found=True))
    assert by_type(authorizer_with(super_users={"User:alice"}))
    assert by_type(authorizer_with(StandardAcl(tx, "app", PREFIXED, "User:alice", "*", Op.WRITE, ALLOW)))
    assert not by_type(authorizer_with(StandardAcl(tx, "app", PREFIXED, "User:alice", "*", Op.WRITE, ALLOW)), "bob")
    assert not by_type(
        authorizer_with(
            StandardAcl(tx, "app1", LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
            StandardAcl(tx, "app", PREFIXED, "User:*", "*", Op.ALL, DENY),
        )
    )
    assert not by_type(
        authorizer_with(
            StandardAcl(tx, "app1", LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
            StandardAcl(tx, "app1", LITERAL, "User:alice", "*", Op.WRITE, DENY),
        )
    )
    assert by_type(
        authorizer_with(
            StandardAcl(tx, "app1", LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
            StandardAcl(tx, "app2", PREFIXED, "User:alice", "*", Op.WRITE, DENY),
        )
    )
    assert not by_type(
        authorizer_with(
            StandardAcl(tx, "*", LITERAL, "User:alice", "*", Op.WRITE, ALLOW),
            StandardAcl(tx, "*", LITERAL, "User:alice", "*", Op.WRITE, DENY),
        )
    )
    with pytest.raises(ValueError):
        authorizer_with().authorize_by_resource_type(user("a"), LOCAL, Op.ANY, TOPIC)


# -- the prefix index against a plain scan --------------------------------------------------


def reference(acls, who, host, op, rt, name, allow_everyone):
    """Kafka's rules, by looking at every ACL."""
    applicable = [
        a
        for a in acls
        if a.resource_type == rt
        and (
            (a.pattern_type == LITERAL and a.resource_name in (name, "*"))
            or (a.pattern_type == PREFIXED and name.startswith(a.resource_name))
        )
    ]
    if not applicable:
        return allow_everyone
    mine = [a for a in applicable if a.principal in (str(who), "User:*") and a.host in ("*", host)]
    if any(a.permission_type == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}, Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(
        op, set()
    )
    return any(a.permission_type == ALLOW and a.operation in {op, Op.ALL} | implied for a in mine)


names = st.text(alphabet="ab*", min_size=1, max_size=4)
acl_strategy = st.builds(
    StandardAcl,
    st.sampled_from([TOPIC, GROUP]),
    names,
    st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from(["User:x", "User:y", "User:*"]),
    st.sampled_from(["*", "h1"]),
    st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]),
    st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(acl_strategy, max_size=25, unique=True), st.booleans())
def test_index_agrees_with_a_scan(acls, allow_everyone):
    a = authorizer_with(*acls, allow_everyone_if_no_acl_found=allow_everyone)
    all_names = ["".join(p) for n in range(0, 5) for p in itertools.product("ab*", repeat=n) if n]
    for rt, name, who, host, op in itertools.product(
        [TOPIC], all_names, [user("x"), user("z")], ["h1", "h2"], [Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS]
    ):
        assert a.authorize_action(who, host, op, rt, name) == reference(
            acls, who, host, op, rt, name, allow_everyone
        ), (
            name,
            who,
            host,
            op,
        )
