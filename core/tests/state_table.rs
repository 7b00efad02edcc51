//! The state machine's table ([`Action::rule`]) is the diagram of docs/PROTOCOL.md §5.1:
//! every edge drawn there is a row of the table (same states, same actor, same cooldown
//! condition), and every row of the table is drawn there.

use approval_core::status::DuringCooldown;
use approval_core::{Action, Actor, Status};
use std::collections::BTreeSet;

const PROTOCOL: &str = include_str!("../../docs/PROTOCOL.md");

/// One edge of the diagram: from which states (and whether only in the cooldown),
/// under which label, to which states.
#[derive(Debug)]
struct Edge {
    from: Vec<Status>,
    in_cooldown: bool,
    label: String,
    to: Vec<Status>,
}

/// The states a node of the diagram names: `PENDING/APPROVED`, `SUCCEEDED | FAILED`,
/// `APPROVED, in its cooldown`.
fn node(text: &str) -> (Vec<Status>, bool) {
    let (names, cooldown) = match text.split_once(',') {
        Some((names, rest)) => (names, rest.contains("cooldown")),
        None => (text, false),
    };
    let states = names
        .split(['/', '|'])
        .map(|n| Status::parse(n.trim()).unwrap_or_else(|| panic!("not a state: {n:?}")))
        .collect();
    (states, cooldown)
}

/// The edges of the text block under "### 5.1 States".
fn diagram() -> Vec<Edge> {
    let section = PROTOCOL
        .split("### 5.1 States")
        .nth(1)
        .expect("PROTOCOL.md has §5.1");
    let block = section
        .split("```")
        .nth(1)
        .expect("§5.1 has a diagram")
        .trim_start_matches("text");
    let mut edges = vec![];
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        // Two diagrams may share a line, three or more spaces apart.
        for part in line.split("   ").filter(|p| !p.trim().is_empty()) {
            let mut rest = part.trim();
            let mut nodes = vec![];
            let mut labels = vec![];
            while let Some(start) = rest.find("--") {
                let end = rest[start..].find("-->").expect("an arrow ends in -->") + start;
                nodes.push(rest[..start].trim().to_owned());
                labels.push(rest[start..end].trim_start_matches("--").trim().to_owned());
                rest = rest[end + 3..].trim();
            }
            nodes.push(rest.to_owned());
            for (i, label) in labels.into_iter().enumerate() {
                let (from, in_cooldown) = node(&nodes[i]);
                let (to, _) = node(&nodes[i + 1]);
                edges.push(Edge {
                    from,
                    in_cooldown,
                    label,
                    to,
                });
            }
        }
    }
    edges
}

/// The action and actor each label of the diagram stands for.
fn action_of(label: &str) -> (Action, Actor) {
    match label {
        "quorum" => (Action::Approve, Actor::Approver),
        "vetoes" | "signed reject" => (Action::Reject, Actor::Approver),
        "signed revoke" => (Action::Revoke, Actor::Approver),
        "signed resolve" => (Action::Resolve, Actor::Approver),
        "execute" | "approval_execute" => (Action::Execute, Actor::Agent),
        "approval_withdraw" => (Action::Withdraw, Actor::Agent),
        "ttl / execute_within" => (Action::Expire, Actor::Server),
        "policy edited or key removed" => (Action::Void, Actor::Server),
        // The executor's report, and crash recovery.
        "" | "(process died, found at start)" => (Action::Finish, Actor::Server),
        other => panic!("a label the table does not know: {other:?}"),
    }
}

#[test]
fn every_edge_of_the_diagram_is_a_row_of_the_table() {
    let edges = diagram();
    assert!(edges.len() >= 10, "{edges:?}");
    for e in &edges {
        let (action, actor) = action_of(&e.label);
        let rule = action.rule();
        assert_eq!(rule.by, actor, "{e:?}");
        assert_eq!(action.by(), actor, "{e:?}");
        for &from in &e.from {
            assert!(rule.from.contains(&from), "{e:?}: {rule:?}");
            assert!(action.allowed_in(from, e.in_cooldown), "{e:?}");
        }
        for to in &e.to {
            assert!(rule.to.contains(to), "{e:?}: {rule:?}");
        }
    }
}

#[test]
fn every_row_of_the_table_is_drawn() {
    let edges = diagram();
    for action in Action::ALL {
        let rule = action.rule();
        assert_eq!(rule.action, action);
        if action == Action::Propose {
            // Creation: no edge leads into PENDING.
            assert!(rule.from.is_empty());
            assert_eq!(rule.to, [Status::Pending]);
            assert_eq!(rule.by, Actor::Agent);
            continue;
        }
        let drawn: Vec<&Edge> = edges
            .iter()
            .filter(|e| action_of(&e.label).0 == action)
            .collect();
        let from: BTreeSet<Status> = drawn.iter().flat_map(|e| e.from.clone()).collect();
        let to: BTreeSet<Status> = drawn.iter().flat_map(|e| e.to.clone()).collect();
        assert_eq!(from, rule.from.iter().copied().collect(), "{action}: from");
        assert_eq!(to, rule.to.iter().copied().collect(), "{action}: to");
        // The cooldown condition: drawn "in its cooldown" is `Only`; the claim is
        // refused during it (PROTOCOL §5.1 "Cooldown"); the rest ignore it.
        let only = drawn
            .iter()
            .any(|e| e.in_cooldown && e.from == [Status::Approved]);
        let expected = match (only, action) {
            (true, _) => DuringCooldown::Only,
            (false, Action::Execute) => DuringCooldown::Never,
            _ => DuringCooldown::Either,
        };
        assert_eq!(rule.cooldown, expected, "{action}");
    }
}

#[test]
fn the_table_answers_for_every_state() {
    for action in Action::ALL {
        for status in Status::ALL {
            for cooling in [false, true] {
                let allowed = action.allowed_in(status, cooling);
                if allowed {
                    assert!(!status.is_final(), "{action} from final {status}");
                }
                if status != Status::Approved {
                    assert_eq!(allowed, action.allowed_in(status, !cooling));
                }
            }
        }
        assert!(action
            .rule()
            .to
            .iter()
            .all(|s| action.rule().from.iter().all(|f| f != s)));
    }
    // During the cooldown a reject is a veto and an execute is refused; after it, the reverse.
    assert!(Action::Reject.allowed_in(Status::Approved, true));
    assert!(!Action::Reject.allowed_in(Status::Approved, false));
    assert!(!Action::Execute.allowed_in(Status::Approved, true));
    assert!(Action::Execute.allowed_in(Status::Approved, false));
    assert_eq!(Action::Execute.to_string(), "execute");
    assert_eq!(Action::Void.to_string(), "void");
}
