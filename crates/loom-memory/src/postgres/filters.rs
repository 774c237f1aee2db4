//! A memory search's filters as SQL over `memory_items` (aliased `i`), with their parameters
//! numbered as the statement built around them needs: one place for every ranking and read
//! of a search.

use postgres::types::ToSql;

use crate::item::Search;

/// A query parameter of any type, for statements whose filters are built at run time.
pub(super) type Param = Box<dyn ToSql + Sync>;

/// The search's filters as SQL over `i` (memory_items), numbering its parameters from
/// `params.len() + 1` on and appending them.
pub(super) fn filter_sql(search: &Search, params: &mut Vec<Param>) -> String {
    let f = &search.filters;
    let mut sql = String::new();
    let mut add = |clause: &str, value: Param| {
        params.push(value);
        sql.push_str(&clause.replace('$', &format!("${}", params.len())));
    };
    if let Some(agent) = &f.agent {
        add(" AND i.agent = $", Box::new(agent.as_str().to_owned()));
    }
    if let Some(tier) = f.tier {
        add(" AND i.tier = $", Box::new(tier.as_str()));
    }
    if let Some(from) = f.from_ms {
        add(" AND i.valid_from >= $", Box::new(from));
    }
    if let Some(to) = f.to_ms {
        add(" AND i.valid_from <= $", Box::new(to));
    }
    if let Some(session) = &f.session {
        add(
            " AND EXISTS (SELECT 1 FROM memory_sources fs WHERE fs.item = i.id \
             AND fs.session = $)",
            Box::new(session.as_str().to_owned()),
        );
    }
    add(
        " AND i.tokens <= $",
        Box::new(i64::try_from(search.budget).unwrap_or(i64::MAX)),
    );
    // Expired L2 notes are never returned (they are purged at the next save).
    add(
        " AND NOT EXISTS (SELECT 1 FROM memory_expiry x WHERE x.item = i.id \
         AND x.expires_ms <= $)",
        Box::new(crate::notes::wall_clock_ms()),
    );
    if !search.history {
        sql.push_str(" AND i.superseded_by IS NULL");
    }
    sql
}

/// `params` as the driver takes them.
pub(super) fn refs(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}
