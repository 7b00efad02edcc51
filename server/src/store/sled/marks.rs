//! [`Store::raise`](super::super::Store::raise) on sled: marks that only go up
//! (passkey counters, spent enrolment links), `k:<name>` to a big-endian u64.

use super::{corrupt, key};
use crate::store::{Raise, StoreError};

/// Raises `name` to `value` unless it holds as much, by compare-and-swap against
/// what was read (a concurrent raise makes this one read again, so two raises never
/// both win with the same value), flushed before it returns.
pub(super) fn raise(
    db: &sled::Db,
    tree: &sled::Tree,
    name: &str,
    value: u64,
) -> Result<Raise, StoreError> {
    crate::store::shared::check_mark_name(name)?;
    let k = [key::MARK, name.as_bytes()].concat();
    loop {
        let cur = tree.get(&k)?;
        let held = match &cur {
            None => None,
            Some(v) => Some(u64::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .map_err(|_| corrupt(&k, "a mark is not 8 bytes"))?,
            )),
        };
        if let Some(h) = held.filter(|h| *h >= value) {
            return Ok(Raise::Kept(h));
        }
        if tree
            .compare_and_swap(&k, cur, Some(&value.to_be_bytes()[..]))?
            .is_ok()
        {
            db.flush()?;
            return Ok(Raise::Raised);
        }
    }
}
