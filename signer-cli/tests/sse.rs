//! The event-stream parser `watch` reads `/v1/events` with.

use signer_cli::commands::watch::{Event, SseParser};

fn ev(name: &str, data: &str) -> Event {
    Event {
        name: name.into(),
        data: data.into(),
    }
}

#[test]
fn events_comments_and_multi_line_data() {
    let mut p = SseParser::default();
    let out = p
        .push(b": keep-alive\n\nevent: proposal\ndata: {\"a\":\ndata: 1}\n\ndata:x\n\n")
        .expect("parse");
    assert_eq!(out, vec![ev("proposal", "{\"a\":\n1}"), ev("message", "x")]);
}

#[test]
fn events_split_across_chunks_and_line_endings() {
    let text = b"event: proposal\r\ndata: one\r\n\r\nevent: lagged\rdata: two\r\revent: proposal\ndata: three\n\n";
    // Every split point, including between CR and LF, gives the same events.
    for cut in 0..text.len() {
        let mut p = SseParser::default();
        let mut out = p.push(&text[..cut]).expect("first half");
        out.extend(p.push(&text[cut..]).expect("second half"));
        assert_eq!(
            out,
            vec![
                ev("proposal", "one"),
                ev("lagged", "two"),
                ev("proposal", "three")
            ],
            "split at {cut}"
        );
    }
}

#[test]
fn an_event_without_data_is_not_dispatched() {
    let mut p = SseParser::default();
    assert_eq!(p.push(b"event: proposal\n\n").expect("parse"), vec![]);
    assert_eq!(
        p.push(b"data: x\n\n").expect("parse"),
        vec![ev("message", "x")]
    );
}
