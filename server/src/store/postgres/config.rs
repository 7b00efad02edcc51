//! The configuration version under quorum (issue #35) on PostgreSQL: two `meta` rows,
//! `config` (the [`ConfigHead`] as JSON) and `config_version` (its version alone, what
//! every instance polls), replaced in one transaction that holds the audit head's
//! lock, the same lock every write takes: changes from any number of instances apply
//! one at a time, each only over the version it names.

use super::*;
use crate::store::shared::seal;

impl PgStore {
    pub(super) fn read_config_head(&self) -> Result<Option<ConfigHead>, StoreError> {
        let pool = self.pool.clone();
        let text: Option<String> = self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let row = c
                .query_opt("SELECT v FROM meta WHERE k = 'config'", &[])
                .await
                .map_err(pg_err)?;
            Ok(row.map(|r| r.get(0)))
        })?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| corrupt("meta config", e)))
            .transpose()
    }

    pub(super) fn read_config_version(&self) -> Result<u64, StoreError> {
        let pool = self.pool.clone();
        let text: Option<String> = self.block(async move {
            let c = pool.get().await.map_err(pool_err)?;
            let row = c
                .query_opt("SELECT v FROM meta WHERE k = 'config_version'", &[])
                .await
                .map_err(pg_err)?;
            Ok(row.map(|r| r.get(0)))
        })?;
        match text {
            None => Ok(0),
            Some(t) => t
                .parse()
                .map_err(|_| corrupt("meta config_version", "not a number")),
        }
    }

    pub(super) fn write_config_head(
        &self,
        from: u64,
        head: &ConfigHead,
        events: Vec<AuditEvent>,
    ) -> Result<bool, StoreError> {
        if head.version != from + 1 {
            return Ok(false);
        }
        let (pool, body, version) = (self.pool.clone(), encode(head)?, head.version.to_string());
        self.block(async move {
            let mut c = pool.get().await.map_err(pool_err)?;
            let tx = c.transaction().await.map_err(pg_err)?;
            let head = lock_head(&tx).await?;
            let current: Option<String> = tx
                .query_opt(
                    "SELECT v FROM meta WHERE k = 'config_version' FOR UPDATE",
                    &[],
                )
                .await
                .map_err(pg_err)?
                .map(|r| r.get(0));
            let current: u64 = match current {
                None => 0,
                Some(t) => t
                    .parse()
                    .map_err(|_| corrupt("meta config_version", "not a number"))?,
            };
            if current != from {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO meta (k, v) VALUES ('config', $1), ('config_version', $2) \
                 ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                &[&body, &version],
            )
            .await
            .map_err(pg_err)?;
            let (sealed, (seq, prev)) = seal(head, events);
            for entry in &sealed {
                let (n, text): (i64, String) = (entry.seq as i64, encode(entry)?);
                let row: [Sql; 2] = [&n, &text];
                tx.execute("INSERT INTO audit (seq, entry) VALUES ($1, $2)", &row)
                    .await
                    .map_err(pg_err)?;
            }
            if !sealed.is_empty() {
                let (n, hash): (i64, String) = (seq as i64, prev.to_string());
                let row: [Sql; 2] = [&n, &hash];
                tx.execute("UPDATE audit_head SET seq = $1, hash = $2", &row)
                    .await
                    .map_err(pg_err)?;
            }
            tx.commit().await.map_err(|e| commit_unknown(pg_err(e)))?;
            Ok(true)
        })
    }
}
