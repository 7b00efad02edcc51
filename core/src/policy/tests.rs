//! The policy module's tests, through its public paths.

use super::*;
use crate::ids::{ApproverName, Kind};
use crate::keyring::{Keyring, PublicKey};
use ed25519_dalek::SigningKey;
use serde_json::json;
use serde_json::Value;
use std::collections::BTreeMap;

pub(crate) fn keyring() -> Keyring {
    let mut text = String::new();
    for (i, n) in ["alice", "bob", "carol"].iter().enumerate() {
        let pk = PublicKey::from_signing_key(&SigningKey::from_bytes(&[i as u8 + 1; 32]));
        text.push_str(&format!("{n} ed25519 {pk}\n"));
    }
    Keyring::parse(&text).unwrap()
}

const GOOD: &str = r#"kind = "email.send"
description = "Send an email"
quorum = 2
approvers = ["alice", "bob", "carol"]
ttl = "30m"
execute_within = "10m"
[[require]]
group = ["carol"]
count = 1
[payload_schema]
type = "object"
required = ["to", "subject"]
[executor]
type = "note"
"#;

fn parse(src: &str) -> Result<Policy, PolicyError> {
    Policy::parse_toml("email.send.toml", src)
}

#[test]
fn good_policy_loads_with_defaults() {
    let p = parse(GOOD).unwrap();
    assert_eq!(p.spec().vetoes, 1);
    assert_eq!(p.spec().max_payload_bytes, 65536);
    assert_eq!(p.canonical_json()["ttl"], json!("30m"));
    assert_eq!(
        p.canonical_json()["executor"],
        json!({"type": "note", "dir": null})
    );
    let back = Policy::from_canonical_json(p.canonical_json()).unwrap();
    assert_eq!(back.sha256(), p.sha256());
    assert!(p.check_keyring(&keyring(), "f", None).is_ok());
}

#[test]
fn hash_ignores_formatting_but_not_content() {
    let reformatted = GOOD
        .replace("quorum = 2", "quorum=2   # two")
        .replace("ttl = \"30m\"", "ttl = \"1800s\"");
    assert_eq!(
        parse(&reformatted).unwrap().sha256(),
        parse(GOOD).unwrap().sha256()
    );
    assert_ne!(
        parse(&GOOD.replace("quorum = 2", "quorum = 3"))
            .unwrap()
            .sha256(),
        parse(GOOD).unwrap().sha256()
    );
}

fn err_of(src: &str) -> PolicyError {
    parse(src).unwrap_err()
}

#[test]
fn refusals_name_line_and_fix() {
    let e = err_of(&GOOD.replace("quorum = 2", "quorum = 4"));
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("cannot be met with 3 approvers"), "{e}");
    assert_eq!(
        err_of(&GOOD.replace("quorum = 2", "quorum = 0")).line,
        Some(3)
    );
    let e = err_of(&GOOD.replace("count = 1", "count = 2"));
    assert_eq!(
        (e.line, e.message.contains("cannot be met by a group of 1")),
        (Some(7), true),
        "{e}"
    );
    let e = err_of(&GOOD.replace("group = [\"carol\"]", "group = [\"dave\"]"));
    assert!(e.message.contains("not in approvers"), "{e}");
    let e = err_of(&GOOD.replace("ttl = \"30m\"", "ttl = \"30 minutes\""));
    assert_eq!(e.line, Some(5), "{e}");
    assert!(e.message.contains("invalid duration"), "{e}");
    let e = err_of(&GOOD.replace("quorum = 2", "quorum = 2\nquorom = 2"));
    assert_eq!(e.line, Some(4), "{e}");
    let e = err_of(&GOOD.replace("type = \"object\"", "type = \"objekt\""));
    assert!(e.message.contains("payload_schema does not compile"), "{e}");
    assert_eq!(e.line, Some(10));
    let e = err_of(&GOOD.replace("type = \"note\"", "type = \"shell\""));
    assert!(e.message.contains("shell"), "{e}");
    let e = err_of(&GOOD.replace("type = \"note\"", "type = \"command\"\nprogram = \"ls\""));
    assert!(e.message.contains("absolute path"), "{e}");
    let e = err_of(&GOOD.replace("type = \"note\"", "type = \"webhook\"\nurl = \"ftp://x\""));
    assert!(e.message.contains("http:// or https://"), "{e}");
    let e = err_of(&GOOD.replace("\"alice\", \"bob\"", "\"alice\", \"alice\""));
    assert!(e.message.contains("listed twice"), "{e}");
    let e = Policy::parse_toml("other.toml", GOOD).unwrap_err();
    assert!(e.message.contains("name the file email.send.toml"), "{e}");
    let e = err_of(&GOOD.replace("[executor]\ntype = \"note\"\n", ""));
    assert!(e.message.contains("executor"), "{e}");
}

#[test]
fn keyring_membership_and_duplicate_kinds() {
    let kr = Keyring::parse(
        &keyring()
            .iter()
            .take(2)
            .map(|(n, k)| Keyring::entry_line(n, k) + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let errs = PolicySet::load(&[("email.send.toml".into(), GOOD.into())], &kr).unwrap_err();
    assert!(
        errs[0].message.contains("\"carol\" is not in the keyring"),
        "{}",
        errs[0]
    );
    assert_eq!(errs[0].line, Some(4));
    let errs = PolicySet::load(
        &[
            ("email.send.toml".into(), GOOD.into()),
            ("x/email.send.toml".into(), GOOD.into()),
        ],
        &keyring(),
    )
    .unwrap_err();
    assert!(errs[0].message.contains("already defined"), "{}", errs[0]);
    let set = PolicySet::load(&[("email.send.toml".into(), GOOD.into())], &keyring()).unwrap();
    assert!(set.get(&Kind::parse("email.send").unwrap()).is_some());
    assert!(set.get(&Kind::parse("email.sned").unwrap()).is_none());
}

#[test]
fn a_missing_approver_disables_only_that_kind() {
    let two = Keyring::parse(
        &keyring()
            .iter()
            .take(2)
            .map(|(n, k)| Keyring::entry_line(n, k) + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let other = GOOD
        .replace("email.send", "note.write")
        .replace("\"alice\", \"bob\", \"carol\"", "\"alice\", \"bob\"")
        .replace("[[require]]\ngroup = [\"carol\"]\ncount = 1\n", "");
    let files = [
        ("email.send.toml".to_owned(), GOOD.to_owned()),
        ("note.write.toml".to_owned(), other),
    ];
    let set = PolicySet::load_disabling(&files, &two).unwrap();
    let email = Kind::parse("email.send").unwrap();
    let note = Kind::parse("note.write").unwrap();
    assert!(
        set.get(&email).is_none(),
        "a disabled kind has no policy to prepare under"
    );
    assert!(matches!(set.state(&note), KindState::Enabled(_)));
    let KindState::Disabled(d) = set.state(&email) else {
        panic!("email.send should be disabled");
    };
    assert_eq!(d.missing(), [ApproverName::parse("carol").unwrap()]);
    assert!(
        d.reason().contains("kind email.send is disabled"),
        "{}",
        d.reason()
    );
    assert!(d.reason().contains("\"carol\""), "{}", d.reason());
    assert_eq!(set.disabled().count(), 1);
    assert_eq!(set.len(), 1);
    // The strict load still refuses, naming the file, the line and the approver.
    let errs = PolicySet::load(&files, &two).unwrap_err();
    assert_eq!(
        (errs[0].file.as_str(), errs[0].line),
        ("email.send.toml", Some(4))
    );
    // Parse errors still refuse the whole load.
    assert!(PolicySet::load_disabling(&[("x.toml".into(), "kind = ".into())], &two).is_err());
    // The key coming back re-enables the kind; going again disables it.
    let back = set.rechecked(&keyring());
    assert!(back.get(&email).is_some() && back.disabled().count() == 0);
    let again = back.rechecked(&two);
    assert!(again.get(&email).is_none());
    assert_eq!(
        again.disabled().next().map(|d| d.file()),
        Some("email.send.toml")
    );
}

#[test]
fn payload_checks() {
    let p = parse(GOOD).unwrap();
    assert!(p.check_payload(&json!({"to": "a", "subject": "b"})).is_ok());
    let e = p.check_payload(&json!({"to": "a"})).unwrap_err();
    assert!(matches!(e, PayloadRefusal::Schema { .. }), "{e}");
    let small = parse(&GOOD.replace("ttl =", "max_payload_bytes = 40\nttl =")).unwrap();
    let e = small
        .check_payload(&json!({"to": "a", "subject": "x".repeat(40)}))
        .unwrap_err();
    assert!(
        matches!(e, PayloadRefusal::TooLarge { limit: 40, .. }),
        "{e}"
    );
    let e = p
        .check_payload(&json!({"to": 9007199254740993u64, "subject": "b"}))
        .unwrap_err();
    assert_eq!(e.pointer(), "/to");
}

/// Issue #36: a refusal of the whole payload read "schema at : ...", with an empty
/// location; it names the root, and a nested one keeps its pointer.
#[test]
fn a_schema_refusal_of_the_whole_payload_names_the_root() {
    let p = parse(GOOD).unwrap();
    let e = p
        .check_payload(&json!(["not", "an", "object"]))
        .unwrap_err();
    assert!(matches!(e, PayloadRefusal::Schema { .. }), "{e}");
    assert_eq!(e.pointer(), "");
    let text = e.to_string();
    assert!(text.contains("at the payload's root"), "{text}");
    assert!(!text.contains("at :"), "{text}");
    let typed = GOOD.replace(
        "[executor]",
        "[payload_schema.properties.to]\ntype = \"string\"\n[executor]",
    );
    let e = parse(&typed)
        .unwrap()
        .check_payload(&json!({"to": 7, "subject": "b"}))
        .unwrap_err();
    assert!(e.to_string().contains("schema at /to: "), "{e}");
}

#[test]
fn payload_nesting_is_limited_so_answers_stay_readable() {
    let p = parse(GOOD).unwrap();
    let nest = |n: usize| -> Value {
        let mut v = json!(1);
        for _ in 0..n {
            v = json!([v]);
        }
        json!({"to": "a", "subject": "b", "deep": v})
    };
    assert!(p.check_payload(&nest(MAX_PAYLOAD_NESTING - 1)).is_ok());
    let e = p.check_payload(&nest(MAX_PAYLOAD_NESTING)).unwrap_err();
    assert!(
        matches!(
            e,
            PayloadRefusal::TooDeep {
                limit: MAX_PAYLOAD_NESTING,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.pointer(),
        format!("/deep{}", "/0".repeat(MAX_PAYLOAD_NESTING - 1))
    );
}

fn mcp_policy(executor: &str) -> String {
    format!(
            "kind = \"fs.write\"\nquorum = 1\napprovers = [\"alice\"]\n[executor]\ntype = \"mcp\"\n{executor}"
        )
}

#[test]
fn mcp_executor_loads_and_refuses_what_cannot_run() {
    let ok = Policy::parse_toml(
            "fs.write.toml",
            &mcp_policy("command = [\"node\", \"server.js\", \"/srv\"]\ntool = \"write_file\"\nenv_from = { API_TOKEN = \"FS_TOKEN\" }\n"),
        )
        .unwrap();
    assert_eq!(ok.spec().executor.mcp_tool(), Some("write_file"));
    assert_eq!(ok.canonical_json()["executor"]["timeout"], json!("1m"));
    assert!(ok.canonical_json()["executor"].get("url").is_none());
    let refused = |exec: &str, needle: &str| {
        let e = Policy::parse_toml("fs.write.toml", &mcp_policy(exec)).unwrap_err();
        assert!(e.message.contains(needle), "{exec}: {e}");
        assert!(e.line.is_some(), "{exec}: {e}");
    };
    refused("tool = \"t\"\n", "exactly one of command");
    refused(
        "command = [\"x\"]\nurl = \"http://h/mcp\"\ntool = \"t\"\n",
        "exactly one of command",
    );
    refused("command = []\ntool = \"t\"\n", "command is empty");
    refused("url = \"ftp://h\"\ntool = \"t\"\n", "http:// or https://");
    refused("command = [\"x\"]\ntool = \"\"\n", "executor.tool");
    // A secret written into a policy (which approvers read) is refused: only names.
    refused(
        "command = [\"x\"]\ntool = \"t\"\nenv_from = { API_TOKEN = \"sk-live 123\" }\n",
        "never a secret",
    );
    refused(
            "url = \"https://h/mcp\"\ntool = \"t\"\nheaders_from = { Authorization = \"Bearer abc\" }\n",
            "never a secret",
        );
    refused(
        "url = \"https://h/mcp\"\ntool = \"t\"\nenv_from = { A = \"B\" }\n",
        "env_from is for command servers",
    );
    refused("command = [\"x\"]\ntool = \"t\"\ntimeout = \"2h\"\n", "1h");
    let both = format!(
        "{}payload_schema_from_tool = true\n[payload_schema]\ntype = \"object\"\n",
        mcp_policy("command = [\"x\"]\ntool = \"t\"\n")
    );
    let e = Policy::parse_toml("fs.write.toml", &both).unwrap_err();
    assert!(e.message.contains("keep one"), "{e}");
}

#[test]
fn payload_schema_from_tool_is_disabled_until_the_schema_arrives() {
    let src =
        mcp_policy("command = [\"x\"]\ntool = \"write_file\"\npayload_schema_from_tool = true\n");
    let files = vec![("fs.write.toml".to_owned(), src)];
    let set = PolicySet::load_disabling(&files, &keyring()).unwrap();
    let kind = Kind::parse("fs.write").unwrap();
    // Never enabled without its schema: no payload goes unchecked.
    assert!(set.get(&kind).is_none());
    assert_eq!(set.awaiting_tool_schema().count(), 1);
    let failed = set.with_tool_schemas(BTreeMap::from([(
        kind.clone(),
        Err("cannot start x: not found".to_owned()),
    )]));
    let KindState::Disabled(d) = failed.state(&kind) else {
        panic!("should stay disabled")
    };
    assert!(d.reason().contains("cannot start x"), "{}", d.reason());
    assert!(d.reason().contains("write_file"), "{}", d.reason());
    let schema =
        json!({"type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}});
    let ok = set.with_tool_schemas(BTreeMap::from([(kind.clone(), Ok(schema.clone()))]));
    let p = ok.get(&kind).expect("enabled once the schema arrived");
    assert_eq!(p.canonical_json()["payload_schema"], schema);
    assert!(p.check_payload(&json!({"path": "a"})).is_ok());
    assert!(matches!(
        p.check_payload(&json!({"content": "a"})),
        Err(PayloadRefusal::Schema { .. })
    ));
    // A tool's arguments are an object, whatever the schema says.
    assert!(matches!(
        p.check_payload(&json!(["a"])),
        Err(PayloadRefusal::Schema { .. })
    ));
    // The policy carried in a receipt (schema filled in) still validates.
    assert!(Policy::from_canonical_json(p.canonical_json()).is_ok());
    // A keyring reload keeps the fetched schema.
    assert!(ok.rechecked(&keyring()).get(&kind).is_some());
    let bad = set.with_tool_schemas(BTreeMap::from([(kind.clone(), Ok(json!({"type": 7})))]));
    assert!(bad.get(&kind).is_none());
}

#[test]
fn expose_and_pass_through_leave_other_policies_hashes_alone_and_are_checked() {
    // Absent or default, the canonical form (and so the hash) is as before.
    let plain = parse(GOOD).unwrap();
    let exposed_false = parse(&format!("expose = false\n{GOOD}")).unwrap();
    assert_eq!(plain.sha256(), exposed_false.sha256());
    assert!(!plain.canonical_json().to_string().contains("expose"));
    let exposed = parse(&format!("expose = true\n{GOOD}")).unwrap();
    assert_ne!(plain.sha256(), exposed.sha256());
    assert!(exposed.spec().expose);

    // A kind named like the gate's own tools cannot be exposed.
    let e = Policy::parse_toml(
        "approval_execute.toml",
        &GOOD
            .replace("email.send", "approval_execute")
            .replace("description", "expose = true\ndescription"),
    )
    .unwrap_err();
    assert!(e.message.contains("gate's own tools"), "{e}");
    assert_eq!(e.line, Some(2));

    let ok = Policy::parse_toml(
        "fs.write.toml",
        &mcp_policy("command = [\"srv\"]\ntool = \"write_file\"\n").replace(
            "quorum = 1",
            "quorum = 1\npass_through = [\"read_file\", \"list_directory\"]",
        ),
    )
    .unwrap();
    assert_eq!(ok.spec().pass_through, ["read_file", "list_directory"]);
    for (list, says) in [
        ("[\"write_file\"]", "the tool this policy gates"),
        ("[\"a\", \"a\"]", "twice"),
        ("[\"approval_status\"]", "not a tool name"),
        ("[\"has space\"]", "not a tool name"),
        ("[\"\"]", "not a tool name"),
    ] {
        let e = Policy::parse_toml(
            "fs.write.toml",
            &mcp_policy("command = [\"srv\"]\ntool = \"write_file\"\n")
                .replace("quorum = 1", &format!("quorum = 1\npass_through = {list}")),
        )
        .unwrap_err();
        assert!(e.message.contains(says), "{list}: {e}");
        assert_eq!(e.line, Some(3), "{list}: {e}");
    }
    let e = parse(&format!("pass_through = [\"x\"]\n{GOOD}")).unwrap_err();
    assert!(
        e.message.contains("needs an executor of type \"mcp\""),
        "{e}"
    );
}

#[test]
fn one_tool_name_means_one_thing_across_policies() {
    let gate = |kind: &str, tool: &str, pass: &str| {
        mcp_policy(&format!("command = [\"srv\"]\ntool = \"{tool}\"\n"))
            .replace("fs.write", kind)
            .replace(
                "quorum = 1",
                &format!("quorum = 1\nexpose = true\npass_through = {pass}"),
            )
    };
    let files = vec![
        (
            "fs.write.toml".to_owned(),
            gate("fs.write", "write_file", "[\"read_file\"]"),
        ),
        (
            "fs.move.toml".to_owned(),
            gate("fs.move", "move_file", "[\"list\"]"),
        ),
    ];
    let set = PolicySet::load(&files, &keyring()).unwrap();
    assert_eq!(set.exposed().count(), 2);
    assert_eq!(
        set.passing_through("read_file").map(|p| p.kind().as_str()),
        Some("fs.write")
    );
    assert!(set.passing_through("write_file").is_none());
    // The same pass-through twice, or a pass-through named like an exposed kind.
    for clash in ["[\"read_file\"]", "[\"fs.write\"]"] {
        let files = vec![
            files[0].clone(),
            (
                "fs.move.toml".to_owned(),
                gate("fs.move", "move_file", clash),
            ),
        ];
        let errors = PolicySet::load(&files, &keyring()).unwrap_err();
        assert_eq!(errors.len(), 1, "{clash}: {errors:?}");
        assert!(
            errors[0]
                .message
                .contains("one tool name must mean one thing"),
            "{errors:?}"
        );
        // The error is on one file and names the other.
        let (on, names) = (&errors[0].file, &errors[0].message);
        assert!(
            (on == "fs.move.toml" && names.contains("fs.write.toml"))
                || (on == "fs.write.toml" && names.contains("fs.move.toml")),
            "{errors:?}"
        );
    }
}

#[test]
fn the_gates_own_kinds_and_executor_are_refused_in_policy_files() {
    let own_kind = "kind = \"gate.config\"\nquorum = 1\napprovers = [\"alice\"]\n[executor]\ntype = \"note\"\n";
    let e = Policy::parse_toml("gate.config.toml", own_kind).unwrap_err();
    assert!(e.message.contains("the gate's own"), "{e}");
    let own_executor =
        "kind = \"x\"\nquorum = 1\napprovers = [\"alice\"]\n[executor]\ntype = \"gate\"\n";
    let e = Policy::parse_toml("x.toml", own_executor).unwrap_err();
    assert!(e.message.contains("the gate's own"), "{e}");
}
