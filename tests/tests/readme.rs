//! The README's client snippets are the files under `examples/clients/`, byte for
//! byte, so what a newcomer copies is what `tests/interop/run.sh` runs against the
//! real gate (issue #36 part 4). A snippet in the README is marked by the line
//! `<!-- file: examples/clients/NAME -->` right before its code block.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The marker before a snippet's code block.
const MARK: &str = "<!-- file: ";

/// (file, code block) for every marked block of `readme`.
fn marked_blocks(readme: &str) -> Result<Vec<(String, String)>> {
    let mut blocks = Vec::new();
    let mut lines = readme.split_inclusive('\n');
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_end().strip_prefix(MARK) else {
            continue;
        };
        let file = rest
            .strip_suffix(" -->")
            .with_context(|| format!("README: {line:?} does not end with ` -->`"))?;
        match lines.next() {
            Some(fence) if fence.starts_with("```") => {}
            other => bail!("README: the marker for {file} is followed by {other:?}, not a code block: put the block right after it"),
        }
        let mut body = String::new();
        loop {
            match lines.next() {
                Some(l) if l.trim_end() == "```" => break,
                Some(l) => body.push_str(l),
                None => bail!("README: the code block of {file} never ends"),
            }
        }
        blocks.push((file.to_owned(), body));
    }
    Ok(blocks)
}

#[test]
fn readme_client_snippets_equal_the_files_in_examples_clients() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let blocks = marked_blocks(&readme)?;
    for (file, body) in &blocks {
        let on_disk = std::fs::read_to_string(root.join(file))
            .with_context(|| format!("README shows {file}, which cannot be read"))?;
        assert!(
            *body == on_disk,
            "README's block for {file} differs from the file: copy the file into the README (or the README's block into the file)\n--- README\n{body}--- {file}\n{on_disk}"
        );
    }
    let dir = root.join("examples").join("clients");
    let mut snippets: Vec<String> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    snippets.retain(|f| f.ends_with(".py") || f.ends_with(".mjs"));
    snippets.sort();
    assert_eq!(snippets.len(), 6, "the six client snippets: {snippets:?}");
    for f in &snippets {
        let path = format!("examples/clients/{f}");
        assert!(
            blocks.iter().any(|(b, _)| *b == path),
            "{path} is not in the README: show it under a `{MARK}{path} -->` line"
        );
    }
    Ok(())
}

#[test]
fn a_marker_must_open_a_code_block() {
    let e = marked_blocks("<!-- file: a.py -->\ntext\n").unwrap_err();
    assert!(e.to_string().contains("not a code block"), "{e}");
    let ok = marked_blocks("<!-- file: a.py -->\n```python\nprint(1)\n```\n").unwrap();
    assert_eq!(ok, [("a.py".to_owned(), "print(1)\n".to_owned())]);
}
