//! Exact JSON: the agent's payload is carried bit for bit, or refused.
//!
//! RFC 8785 (JCS) can only carry what an IEEE double can carry, and a JSON object
//! with a repeated key means different things to different parsers. A preview that
//! an approver reads must mean exactly one thing, so before anything is hashed we
//! refuse, with the JSON pointer of the offending value:
//! integers beyond ±2^53, numbers whose decimal text does not survive a round trip
//! through `f64`, duplicate keys, lone surrogates, and non-finite numbers.
//!
//! `serde_json` silently keeps the last of two duplicate keys and rounds numbers, so
//! raw text goes through [`parse_exact`], a small parser of our own that builds a
//! `serde_json::Value` and reports each such loss instead of hiding it. Values that
//! were already parsed elsewhere go through [`check_value`], which catches what can
//! still be seen (large integers). The canonical bytes themselves come from
//! `serde_json_canonicalizer`; we never format numbers by hand.

use serde_json::{Map, Number, Value};
use std::fmt;
use thiserror::Error;

/// Largest integer a double carries exactly: 2^53.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// Deepest nesting accepted, so that hostile input cannot exhaust the stack.
pub const MAX_DEPTH: usize = 128;

/// Why a JSON value cannot be carried exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// An integer with magnitude above 2^53.
    IntegerTooLarge,
    /// A number whose decimal text differs from the nearest double.
    LosesPrecision,
    /// A number too large for a double (it would become infinity).
    NotFinite,
    /// An object key that appears twice.
    DuplicateKey(String),
    /// A `\uD800`-`\uDFFF` escape without its pair.
    LoneSurrogate,
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not JSON at all.
    Syntax(String),
}

/// A payload refusal: what was wrong, where (RFC 6901 pointer) and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct PayloadError {
    /// The JSON pointer of the value, `""` for the whole document.
    pub pointer: String,
    /// What is wrong.
    pub problem: Problem,
}

impl PayloadError {
    /// What the sender should do instead.
    pub fn advice(&self) -> &'static str {
        match self.problem {
            Problem::IntegerTooLarge => {
                "integers beyond ±2^53 cannot be carried exactly: send it as a string"
            }
            Problem::LosesPrecision => {
                "this number would change when read as a double: send it as a string"
            }
            Problem::NotFinite => "this number is too large for a double: send it as a string",
            Problem::DuplicateKey(_) => "each key may appear once: remove the duplicate",
            Problem::LoneSurrogate => {
                "strings must be valid Unicode: remove the unpaired surrogate escape"
            }
            Problem::TooDeep => "nest less deeply",
            Problem::Syntax(_) => "send valid JSON",
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        let what = match &self.problem {
            Problem::IntegerTooLarge => "integer beyond ±2^53".to_owned(),
            Problem::LosesPrecision => "number loses precision as a double".to_owned(),
            Problem::NotFinite => "number out of range for a double".to_owned(),
            Problem::DuplicateKey(k) => format!("duplicate key {k:?}"),
            Problem::LoneSurrogate => "lone surrogate in string".to_owned(),
            Problem::TooDeep => format!("nesting deeper than {MAX_DEPTH}"),
            Problem::Syntax(m) => format!("invalid JSON: {m}"),
        };
        write!(f, "{what} at {at}: {}", self.advice())
    }
}

/// Appends one reference token to a JSON pointer, escaping `~` and `/` (RFC 6901).
pub fn pointer_push(base: &str, token: &str) -> String {
    let mut p = String::with_capacity(base.len() + token.len() + 1);
    p.push_str(base);
    p.push('/');
    for c in token.chars() {
        match c {
            '~' => p.push_str("~0"),
            '/' => p.push_str("~1"),
            c => p.push(c),
        }
    }
    p
}

/// The result of reading JSON text: the value, and every place where it could not be
/// carried exactly (empty when the text is exact).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The value. Where a problem was found, a stand-in (`null`, or the first key's value) is used.
    pub value: Value,
    /// Problems found, in document order.
    pub problems: Vec<PayloadError>,
}

/// Parses JSON text and refuses anything that cannot be carried exactly.
pub fn parse_exact(text: &str) -> Result<Value, PayloadError> {
    let parsed = parse_collecting(text)?;
    match parsed.problems.into_iter().next() {
        Some(p) => Err(p),
        None => Ok(parsed.value),
    }
}

/// Parses JSON text, collecting exactness problems instead of stopping at the first.
///
/// Only a syntax error stops the parse. This lets a caller that reads a larger
/// document (a JSON-RPC request) decide whether a problem lies inside the part it
/// cares about (the payload) by its pointer.
pub fn parse_collecting(text: &str) -> Result<Parsed, PayloadError> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        problems: Vec::new(),
    };
    p.ws();
    let value = p.value(String::new(), 0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.syntax("", "trailing characters after the JSON value"));
    }
    Ok(Parsed {
        value,
        problems: p.problems,
    })
}

/// Checks a value that was parsed elsewhere (for instance by `serde_json` inside an
/// RPC framework) for what can still be seen: integers beyond ±2^53, non-finite
/// numbers and excessive depth.
pub fn check_value(v: &Value) -> Result<(), PayloadError> {
    fn walk(v: &Value, ptr: &mut String, depth: usize) -> Result<(), PayloadError> {
        if depth > MAX_DEPTH {
            return Err(PayloadError {
                pointer: ptr.clone(),
                problem: Problem::TooDeep,
            });
        }
        match v {
            Value::Number(n) => {
                let bad = if let Some(u) = n.as_u64() {
                    (u > MAX_SAFE_INTEGER).then_some(Problem::IntegerTooLarge)
                } else if let Some(i) = n.as_i64() {
                    (i.unsigned_abs() > MAX_SAFE_INTEGER).then_some(Problem::IntegerTooLarge)
                } else {
                    n.as_f64()
                        .filter(|f| !f.is_finite())
                        .map(|_| Problem::NotFinite)
                };
                match bad {
                    Some(problem) => Err(PayloadError {
                        pointer: ptr.clone(),
                        problem,
                    }),
                    None => Ok(()),
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    let len = ptr.len();
                    ptr.push_str(&format!("/{i}"));
                    walk(x, ptr, depth + 1)?;
                    ptr.truncate(len);
                }
                Ok(())
            }
            Value::Object(m) => {
                for (k, x) in m {
                    let mut p = pointer_push(ptr, k);
                    walk(x, &mut p, depth + 1)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(v, &mut String::new(), 0)
}

/// The RFC 8785 canonical bytes of a value.
///
/// Call [`check_value`] (or parse with [`parse_exact`]) first: this function
/// assumes a value JCS can carry.
///
/// Written here rather than left to `serde_json_canonicalizer` for speed (every
/// proposal and audit entry is hashed on the request path), but only the easy
/// parts: structure, member order (UTF-16 code units, RFC 8785 section 3.2.3),
/// strings (serde_json escapes exactly the characters JCS does, with the same
/// spellings) and integers a double holds exactly. Every other number is
/// formatted by `serde_json_canonicalizer`, whose ECMAScript number formatting
/// the RFC 8785 reference vectors check. A property test holds the two to the
/// same bytes for arbitrary values.
pub fn canonical_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical(v, &mut out);
    out
}

/// Integers up to 2^53 print the same as the double they are, in plain digits.
const EXACT_INT: u64 = 1 << 53;

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) if u <= EXACT_INT => out.extend_from_slice(u.to_string().as_bytes()),
            (_, Some(i)) if i.unsigned_abs() <= EXACT_INT => {
                out.extend_from_slice(i.to_string().as_bytes())
            }
            // A number cannot fail to serialise: serde_json's are finite.
            _ => out.extend_from_slice(&serde_json_canonicalizer::to_vec(v).unwrap_or_default()),
        },
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| utf16_order(a.0, b.0));
            out.push(b'{');
            for (i, (k, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    // Writing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// RFC 8785 sorts member names by their UTF-16 code units. For names that are
/// all below U+E000 that is the same as byte order, the common case.
fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    let plain = |s: &str| s.bytes().all(|c| c < 0xEE);
    if plain(a) && plain(b) {
        a.as_bytes().cmp(b.as_bytes())
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    problems: Vec<PayloadError>,
}

impl Parser<'_> {
    fn syntax(&self, ptr: &str, msg: &str) -> PayloadError {
        PayloadError {
            pointer: ptr.to_owned(),
            problem: Problem::Syntax(format!("{msg} at byte {}", self.i)),
        }
    }

    fn problem(&mut self, ptr: &str, problem: Problem) {
        self.problems.push(PayloadError {
            pointer: ptr.to_owned(),
            problem,
        });
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, ptr: String, depth: usize) -> Result<Value, PayloadError> {
        if depth > MAX_DEPTH {
            // Recorded, not fatal, so that a caller reading a larger document can tell
            // where the deep value sits; skipped without recursion.
            self.problem(&ptr, Problem::TooDeep);
            match self.s.get(self.i) {
                Some(b'[' | b'{') => self.skip_nested(&ptr)?,
                // A scalar cannot recurse: read it as usual.
                _ => drop(self.value(ptr, 0)?),
            }
            return Ok(Value::Null);
        }
        match self.s.get(self.i) {
            Some(b'{') => self.object(ptr, depth),
            Some(b'[') => self.array(ptr, depth),
            Some(b'"') => Ok(Value::String(self.string(&ptr)?)),
            Some(b't') if self.eat(b"true") => Ok(Value::Bool(true)),
            Some(b'f') if self.eat(b"false") => Ok(Value::Bool(false)),
            Some(b'n') if self.eat(b"null") => Ok(Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(&ptr),
            Some(_) => Err(self.syntax(&ptr, "expected a JSON value")),
            None => Err(self.syntax(&ptr, "unexpected end of input")),
        }
    }

    /// Skips one value that is nested too deeply to parse, iteratively: brackets are
    /// balanced and strings skipped, nothing else is checked (the value is refused anyway).
    fn skip_nested(&mut self, ptr: &str) -> Result<(), PayloadError> {
        let mut open = 0usize;
        loop {
            match self.s.get(self.i) {
                None => return Err(self.syntax(ptr, "unexpected end of input")),
                Some(b'"') => {
                    self.i += 1;
                    loop {
                        match self.s.get(self.i) {
                            None => return Err(self.syntax(ptr, "unterminated string")),
                            Some(b'\\') => self.i += 2,
                            Some(b'"') => {
                                self.i += 1;
                                break;
                            }
                            Some(_) => self.i += 1,
                        }
                    }
                }
                Some(b'[' | b'{') => {
                    open += 1;
                    self.i += 1;
                }
                Some(b']' | b'}') => {
                    if open == 0 {
                        return Err(self.syntax(ptr, "unbalanced brackets"));
                    }
                    open -= 1;
                    self.i += 1;
                }
                Some(_) => self.i += 1,
            }
            if open == 0 {
                return Ok(());
            }
        }
    }

    fn object(&mut self, ptr: String, depth: usize) -> Result<Value, PayloadError> {
        self.i += 1;
        let mut map = Map::new();
        self.ws();
        if self.eat(b"}") {
            return Ok(Value::Object(map));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.syntax(&ptr, "expected a string key"));
            }
            let key = self.string(&ptr)?;
            self.ws();
            if !self.eat(b":") {
                return Err(self.syntax(&ptr, "expected ':'"));
            }
            self.ws();
            let child = pointer_push(&ptr, &key);
            let v = self.value(child.clone(), depth + 1)?;
            if map.contains_key(&key) {
                self.problem(&child, Problem::DuplicateKey(key));
            } else {
                map.insert(key, v);
            }
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"}") {
                return Ok(Value::Object(map));
            }
            return Err(self.syntax(&ptr, "expected ',' or '}'"));
        }
    }

    fn array(&mut self, ptr: String, depth: usize) -> Result<Value, PayloadError> {
        self.i += 1;
        let mut out = Vec::new();
        self.ws();
        if self.eat(b"]") {
            return Ok(Value::Array(out));
        }
        loop {
            self.ws();
            let v = self.value(format!("{ptr}/{}", out.len()), depth + 1)?;
            out.push(v);
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"]") {
                return Ok(Value::Array(out));
            }
            return Err(self.syntax(&ptr, "expected ',' or ']'"));
        }
    }

    fn hex4(&mut self, ptr: &str) -> Result<u32, PayloadError> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .ok_or_else(|| self.syntax(ptr, "invalid \\u escape"))?;
        // Four ASCII hex digits always parse.
        let v = u32::from_str_radix(std::str::from_utf8(h).unwrap_or("0"), 16).unwrap_or(0);
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self, ptr: &str) -> Result<String, PayloadError> {
        self.i += 1;
        let mut out = String::new();
        let mut lone = false;
        loop {
            let start = self.i;
            while let Some(&b) = self.s.get(self.i) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            // The input is a &str, so every run between ASCII delimiters is valid UTF-8.
            out.push_str(std::str::from_utf8(&self.s[start..self.i]).unwrap_or("\u{fffd}"));
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    if lone {
                        self.problem(ptr, Problem::LoneSurrogate);
                    }
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = *self
                        .s
                        .get(self.i)
                        .ok_or_else(|| self.syntax(ptr, "unterminated string"))?;
                    self.i += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4(ptr)?;
                            let cp = if (0xD800..0xDC00).contains(&hi) {
                                if self.s[self.i..].starts_with(b"\\u") {
                                    let save = self.i;
                                    self.i += 2;
                                    let lo = self.hex4(ptr)?;
                                    if (0xDC00..0xE000).contains(&lo) {
                                        Some(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                                    } else {
                                        self.i = save;
                                        None
                                    }
                                } else {
                                    None
                                }
                            } else if (0xDC00..0xE000).contains(&hi) {
                                None
                            } else {
                                Some(hi)
                            };
                            match cp.and_then(char::from_u32) {
                                Some(ch) => out.push(ch),
                                None => {
                                    lone = true;
                                    out.push('\u{fffd}');
                                }
                            }
                        }
                        _ => return Err(self.syntax(ptr, "invalid escape")),
                    }
                }
                Some(_) => return Err(self.syntax(ptr, "control character in string")),
                None => return Err(self.syntax(ptr, "unterminated string")),
            }
        }
    }

    fn number(&mut self, ptr: &str) -> Result<Value, PayloadError> {
        let start = self.i;
        self.eat(b"-");
        let int_start = self.i;
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.s.get(self.i) {
                    self.i += 1;
                }
            }
            _ => return Err(self.syntax(ptr, "invalid number")),
        }
        let int_end = self.i;
        let mut integer = true;
        if self.eat(b".") {
            integer = false;
            let d = self.i;
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
            if d == self.i {
                return Err(self.syntax(ptr, "invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            integer = false;
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            let d = self.i;
            while let Some(b'0'..=b'9') = self.s.get(self.i) {
                self.i += 1;
            }
            if d == self.i {
                return Err(self.syntax(ptr, "invalid number"));
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("0");
        let negative = start != int_start;
        if integer {
            let digits = &self.s[int_start..int_end];
            let magnitude: Option<u64> = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse().ok());
            return Ok(match magnitude {
                Some(m) if m <= MAX_SAFE_INTEGER => {
                    let m = m as i64;
                    Value::Number(Number::from(if negative { -m } else { m }))
                }
                _ => {
                    self.problem(ptr, Problem::IntegerTooLarge);
                    Value::Null
                }
            });
        }
        let f: f64 = text
            .parse()
            .map_err(|_| self.syntax(ptr, "invalid number"))?;
        if !f.is_finite() {
            self.problem(ptr, Problem::NotFinite);
            return Ok(Value::Null);
        }
        // A fraction or exponent that names an integer (1.0, 2e3) is still a double
        // to JCS, and prints as the integer; keep it as a double here.
        let Some(n) = Number::from_f64(f) else {
            self.problem(ptr, Problem::NotFinite);
            return Ok(Value::Null);
        };
        // Compare with the spelling JCS will sign, not with Rust's own shortest
        // form: when a double lies exactly halfway between two shortest decimals
        // (1795465850265754.25), JCS (ECMAScript) picks the even digit (…754.2)
        // and Rust's formatter the other (…754.3), so checking against Rust
        // refused the canonical spelling and let the other one change meaning.
        let value = Value::Number(n);
        let canonical = canonical_bytes(&value);
        if decimal_key(text) != decimal_key(std::str::from_utf8(&canonical).unwrap_or("")) {
            self.problem(ptr, Problem::LosesPrecision);
            return Ok(Value::Null);
        }
        Ok(value)
    }
}

/// Reduces a decimal number's text to (sign, significant digits, exponent of the
/// last digit), so that two spellings of one value compare equal.
fn decimal_key(text: &str) -> (bool, String, i64) {
    let (neg, t) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mant, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i64>().unwrap_or(0)),
        None => (t, 0),
    };
    let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
    let mut digits: String = format!("{ip}{fp}");
    let mut exp = exp.saturating_sub(fp.len() as i64);
    let trimmed = digits.trim_start_matches('0').to_owned();
    digits = trimmed;
    while digits.ends_with('0') {
        digits.pop();
        exp = exp.saturating_add(1);
    }
    if digits.is_empty() {
        return (false, String::new(), 0);
    }
    (neg, digits, exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(text: &str) -> PayloadError {
        parse_exact(text).unwrap_err()
    }

    #[test]
    fn exact_json_is_accepted_unchanged() {
        let v =
            parse_exact(r#"{"a":[1,-2,0.5,1e21,5e-324,"x\u00e9\ud83d\ude00"],"b":null,"c":true}"#)
                .unwrap();
        assert_eq!(
            v,
            json!({"a":[1,-2,0.5,1e21,5e-324,"xé😀"],"b":null,"c":true})
        );
        assert_eq!(
            parse_exact("9007199254740992").unwrap(),
            json!(9007199254740992u64)
        );
        assert_eq!(
            parse_exact("-9007199254740992").unwrap(),
            json!(-9007199254740992i64)
        );
        assert_eq!(parse_exact("0.1").unwrap(), json!(0.1));
        assert_eq!(
            parse_exact("1.7976931348623157e308").unwrap(),
            json!(1.7976931348623157e308)
        );
    }

    #[test]
    fn large_integers_are_refused_with_pointer() {
        let e = err(r#"{"amount": 9007199254740993}"#);
        assert_eq!(e.pointer, "/amount");
        assert_eq!(e.problem, Problem::IntegerTooLarge);
        assert!(e.to_string().contains("send it as a string"), "{e}");
        assert_eq!(err("[18446744073709551615]").pointer, "/0");
        assert_eq!(err("-9007199254740993").problem, Problem::IntegerTooLarge);
        assert_eq!(
            err("123456789012345678901234567890").problem,
            Problem::IntegerTooLarge
        );
    }

    #[test]
    fn imprecise_and_infinite_numbers_are_refused() {
        assert_eq!(
            err(r#"{"x": 0.10000000000000000000000001}"#).problem,
            Problem::LosesPrecision
        );
        assert_eq!(err("3.141592653589793238").problem, Problem::LosesPrecision);
        assert_eq!(err("1e400").problem, Problem::NotFinite);
        // Exponents at the edge of i64 are refused, never an arithmetic overflow.
        assert_eq!(
            err("1.5e-9223372036854775808").problem,
            Problem::LosesPrecision
        );
        assert!(parse_exact("1.5e9223372036854775807").is_err());
        assert_eq!(err("9007199254740993.0").problem, Problem::LosesPrecision);
    }

    #[test]
    fn duplicate_keys_are_refused_nested() {
        let e = err(r#"{"a": {"b": 1, "b": 2}}"#);
        assert_eq!(e.pointer, "/a/b");
        assert_eq!(e.problem, Problem::DuplicateKey("b".into()));
    }

    #[test]
    fn lone_surrogates_are_refused() {
        assert_eq!(err(r#"{"t": "\ud800"}"#).problem, Problem::LoneSurrogate);
        assert_eq!(err(r#"{"t": "\udc00x"}"#).pointer, "/t");
        assert_eq!(err(r#""\ud800\u0041""#).problem, Problem::LoneSurrogate);
    }

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(
            err(r#"{"a/b~c": [0, 9007199254740993]}"#).pointer,
            "/a~1b~0c/1"
        );
    }

    #[test]
    fn syntax_errors_and_depth() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\"}",
            "01",
            "1.",
            "-",
            "\"\u{1}\"",
            "nul",
            "1 2",
            "+1",
        ] {
            assert!(matches!(err(bad).problem, Problem::Syntax(_)), "{bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(err(&deep).problem, Problem::TooDeep);
        // Deep scalars, and a deep value followed by more document, are located.
        let deep = "[".repeat(MAX_DEPTH + 1) + "123" + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(err(&deep).problem, Problem::TooDeep);
        let doc = format!(
            r#"{{"a": {}, "b": 1}}"#,
            "[".repeat(MAX_DEPTH + 5) + &"]".repeat(MAX_DEPTH + 5)
        );
        let p = parse_collecting(&doc).unwrap();
        assert_eq!(p.problems[0].problem, Problem::TooDeep);
        assert!(p.problems[0].pointer.starts_with("/a/0/0"));
        assert_eq!(p.value["b"], 1);
        // A million brackets do not overflow the stack.
        assert!(matches!(
            err(&"[".repeat(1_000_000)).problem,
            Problem::Syntax(_)
        ));
        let closed = "[".repeat(1_000_000) + &"]".repeat(1_000_000);
        assert_eq!(err(&closed).problem, Problem::TooDeep);
    }

    #[test]
    fn collecting_reports_every_problem() {
        let p = parse_collecting(
            r#"{"m":"x","params":{"payload":{"a":1,"a":2},"n":9007199254740993}}"#,
        )
        .unwrap();
        let ptrs: Vec<_> = p.problems.iter().map(|e| e.pointer.as_str()).collect();
        assert_eq!(ptrs, ["/params/payload/a", "/params/n"]);
    }

    #[test]
    fn check_value_catches_parsed_large_integers() {
        assert!(check_value(&json!({"a": [1, 2.5, "x"]})).is_ok());
        let e = check_value(&json!({"a": [1, 9007199254740993u64]})).unwrap_err();
        assert_eq!(
            (e.pointer.as_str(), e.problem),
            ("/a/1", Problem::IntegerTooLarge)
        );
        assert!(check_value(&json!(-9007199254740993i64)).is_err());
    }
}
