"""KafkaPrincipal and ssl.principal.mapping.rules, as Kafka's SslPrincipalMapperTest checks them."""

from __future__ import annotations

import pytest

from kesque.security.principal import ANONYMOUS, KafkaPrincipal, NoMatchingRule, SslPrincipalMapper, parse_principal


def test_principal_text_and_parse():
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert parse_principal("User:alice") == KafkaPrincipal("User", "alice")
    assert parse_principal("User:CN=a:b") == KafkaPrincipal("User", "CN=a:b")  # split at the first colon
    for bad in ("", None, "alice"):
        with pytest.raises(ValueError, match="expected a string in format principalType:principalName but got"):
            parse_principal(bad)


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules(rules):
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_mapping():
    mapper = SslPrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_default_and_no_matching_rule():
    assert SslPrincipalMapper(None).name("CN=a,O=b") == "CN=a,O=b"
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),O=x$/$1/")
    assert mapper.name("CN=a,O=x") == "a"
    with pytest.raises(NoMatchingRule, match=r"No rules apply to CN=a,O=y, rules \[RULE:\^CN=\(\.\*\?\),O=x\$/\$1\]"):
        mapper.name("CN=a,O=y")


def test_back_references_to_missing_groups_stay_text():
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*)$/$1@$4/").name("CN=a,OU=b") == "a@$4"
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*)$/$12/").name("CN=a,OU=b") == "a2"  # $12 with 2 groups: $1, "2"
    assert SslPrincipalMapper(r"RULE:^CN=(.*?),OU=(.*)$/\$1-$2/").name("CN=a,OU=b") == "$1-b"


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
        ),
    ],
)
def test_rules_splitting(expected, rules):
    assert str(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace():
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
