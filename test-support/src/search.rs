//! The search's evaluation sets, and how a ranking is scored on them.
//!
//! Two sets of realistic tools with tasks in words, each task naming the
//! one tool it must find (`search/fixed.json`, 30 tasks, written with the
//! BM25 index; `search/held_out.json`, 70 tasks over 63 other tools,
//! written before the hybrid ranking was tuned, which reads only the fixed
//! set). [`catalog`] puts both sets' tools among generated distractors up
//! to a size, so that one catalog answers both sets' tasks.
//!
//! Distractors come in two kinds: [`warehouse_distractors`], the one
//! domain the first search tests used, and [`varied_distractors`], twelve
//! domains of records (laboratories, farms, fleets, schools...) worded
//! with the verbs and nouns real tools use.

use serde::Deserialize;
use serde_json::{Value, json};
use toolmesh_proto::pb;

/// A set: its tools and its tasks.
#[derive(Debug, Clone)]
pub struct SearchSet {
    /// The set's name (`fixed`, `held-out`).
    pub name: &'static str,
    /// Its realistic tools.
    pub tools: Vec<pb::ToolDescriptor>,
    /// Each task in words, with the name of the tool it must find.
    pub queries: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct SetFile {
    tools: Vec<ToolEntry>,
    queries: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct ToolEntry {
    name: String,
    description: String,
    /// Each argument's description, or its whole schema.
    arguments: serde_json::Map<String, Value>,
    tags: Vec<String>,
}

/// The fixed set (30 tasks).
pub fn fixed() -> SearchSet {
    parse("fixed", include_str!("search/fixed.json"))
}

/// The held-out set (70 tasks).
pub fn held_out() -> SearchSet {
    parse("held-out", include_str!("search/held_out.json"))
}

fn parse(name: &'static str, text: &str) -> SearchSet {
    let file: SetFile = serde_json::from_str(text).expect("a search set parses");
    let tools = file
        .tools
        .into_iter()
        .map(|t| {
            let properties: serde_json::Map<String, Value> = t
                .arguments
                .into_iter()
                .map(|(name, argument)| match argument {
                    Value::String(description) => {
                        (name, json!({"type": "string", "description": description}))
                    }
                    schema => (name, schema),
                })
                .collect();
            tool(&t.name, &t.description, Value::Object(properties), t.tags)
        })
        .collect::<Vec<_>>();
    for (query, expected) in &file.queries {
        assert!(
            tools.iter().any(|t| &t.name == expected),
            "{name}: {query:?} expects {expected}, which the set does not have"
        );
    }
    SearchSet {
        name,
        tools,
        queries: file.queries,
    }
}

fn tool(name: &str, description: &str, properties: Value, tags: Vec<String>) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        name: name.into(),
        description: description.into(),
        input_schema_json: json!({"type": "object", "properties": properties}).to_string(),
        tags,
        ..Default::default()
    }
}

/// Both sets' tools, then `distractors` up to `size` tools in all.
pub fn catalog(
    size: usize,
    distractors: fn(usize) -> Vec<pb::ToolDescriptor>,
) -> Vec<pb::ToolDescriptor> {
    let mut tools = fixed().tools;
    tools.extend(held_out().tools);
    let missing = size.saturating_sub(tools.len());
    tools.extend(distractors(missing));
    tools
}

/// `n` generated tools of one domain (warehouse operations) that share
/// the common words (get, list, update, create, record, status).
pub fn warehouse_distractors(n: usize) -> Vec<pb::ToolDescriptor> {
    const VERBS: &[&str] = &[
        "get", "list", "update", "create", "archive", "sync", "count", "check",
    ];
    const NOUNS: &[&str] = &[
        "pallet",
        "shipment",
        "bin",
        "forklift",
        "sensor",
        "dock",
        "carrier",
        "manifest",
        "rack",
        "barcode",
        "supplier",
        "container",
        "zone",
        "shift",
        "picker",
        "crate",
    ];
    (0..n)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
            let site = i / (VERBS.len() * NOUNS.len());
            tool(
                &format!("{verb}_{noun}_{site}"),
                &format!("{verb} the {noun} records of warehouse site {site}, with their status and location"),
                json!({
                    "site_id": {"type": "string", "description": "Warehouse site"},
                    format!("{noun}_id"): {"type": "string", "description": format!("The {noun}")},
                }),
                vec!["warehouse".into()],
            )
        })
        .collect()
}

/// Domains of the varied distractors: a short name for tool names, the
/// domain in words, and the records it keeps.
const DOMAINS: &[(&str, &str, &[&str])] = &[
    (
        "lab",
        "laboratory",
        &[
            "sample",
            "reagent",
            "centrifuge",
            "assay",
            "freezer",
            "specimen",
            "instrument calibration",
            "test plate",
        ],
    ),
    (
        "farm",
        "farm",
        &[
            "field",
            "tractor",
            "crop",
            "harvest",
            "irrigation valve",
            "silo",
            "herd",
            "seed lot",
        ],
    ),
    (
        "fleet",
        "vehicle fleet",
        &[
            "vehicle",
            "driver",
            "fuel card",
            "tire",
            "maintenance job",
            "trip log",
            "trailer",
            "parking permit",
        ],
    ),
    (
        "ward",
        "hospital ward",
        &[
            "bed",
            "ventilator",
            "infusion pump",
            "linen cart",
            "wheelchair",
            "supply cabinet",
            "sterilizer",
            "staff badge",
        ],
    ),
    (
        "school",
        "school",
        &[
            "classroom",
            "course",
            "timetable",
            "locker",
            "textbook",
            "enrollment",
            "bus route",
            "cafeteria menu",
        ],
    ),
    (
        "plant",
        "factory",
        &[
            "machine",
            "work order",
            "assembly line",
            "spare part",
            "mold",
            "conveyor",
            "quality check",
            "shift roster",
        ],
    ),
    (
        "library",
        "library",
        &[
            "book loan",
            "reading room",
            "archive box",
            "microfilm",
            "catalog card",
            "donation",
            "study carrel",
            "periodical",
        ],
    ),
    (
        "hotel",
        "hotel",
        &[
            "room key",
            "minibar",
            "housekeeping task",
            "laundry bag",
            "conference room",
            "luggage tag",
            "guest folio",
            "parking space",
        ],
    ),
    (
        "grid",
        "power utility",
        &[
            "meter",
            "transformer",
            "substation",
            "outage report",
            "pole",
            "feeder line",
            "smart meter reading",
            "crew dispatch",
        ],
    ),
    (
        "ramp",
        "airport ground",
        &[
            "gate",
            "baggage belt",
            "tug",
            "fuel truck",
            "de-icing pad",
            "jet bridge",
            "catering cart",
            "ground crew",
        ],
    ),
    (
        "museum",
        "museum",
        &[
            "exhibit",
            "artwork",
            "display case",
            "loan agreement",
            "audio guide",
            "visitor count",
            "restoration job",
            "gallery",
        ],
    ),
    (
        "port",
        "shipping port",
        &[
            "berth",
            "crane",
            "vessel call",
            "customs hold",
            "reefer plug",
            "yard block",
            "pilot booking",
            "mooring line",
        ],
    ),
];

/// The verbs of the varied distractors, each with its description; `{n}`
/// is the record, `{d}` the domain, `{s}` the site.
const VERBS: &[(&str, &str)] = &[
    ("get", "Get one {n} of the {d} at site {s} by its id"),
    (
        "list",
        "List the {n} records of the {d} at site {s}, filtered by status",
    ),
    (
        "update",
        "Update the status and notes of a {n} at {d} site {s}",
    ),
    ("create", "Create a new {n} record for {d} site {s}"),
    ("archive", "Archive the closed {n} records of {d} site {s}"),
    (
        "sync",
        "Sync the {n} records of {d} site {s} with the central system",
    ),
    ("count", "Count the {n} records of {d} site {s} by state"),
    (
        "check",
        "Check the {n} records of {d} site {s} for problems and report them",
    ),
    (
        "export",
        "Export the {n} records of {d} site {s} as a report",
    ),
    ("assign", "Assign a {n} at {d} site {s} to a team member"),
];

/// `n` generated tools over twelve domains of records, worded with the
/// common verbs (get, list, update, create, check, export, assign...).
pub fn varied_distractors(n: usize) -> Vec<pb::ToolDescriptor> {
    let per_site: usize = DOMAINS
        .iter()
        .map(|(_, _, nouns)| nouns.len())
        .sum::<usize>()
        * VERBS.len();
    (0..n)
        .map(|i| {
            let site = i / per_site;
            let mut rest = i % per_site;
            let (verb, template) = VERBS[rest % VERBS.len()];
            rest /= VERBS.len();
            let (short, domain, noun) = DOMAINS
                .iter()
                .flat_map(|(short, domain, nouns)| nouns.iter().map(move |n| (*short, *domain, *n)))
                .nth(rest)
                .expect("within the domains");
            let snake = noun.replace([' ', '-'], "_");
            tool(
                &format!("{verb}_{snake}_{short}{site}"),
                &template
                    .replace("{n}", noun)
                    .replace("{d}", domain)
                    .replace("{s}", &site.to_string()),
                json!({
                    "site_id": {"type": "string", "description": format!("The {domain} site")},
                    format!("{snake}_id"): {"type": "string", "description": format!("The {noun}")},
                    "status": {"type": "string", "description": "Only records in this state"},
                }),
                vec![short.into()],
            )
        })
        .collect()
}

/// How well a ranking did on a set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quality {
    /// Tasks whose tool came first.
    pub first: usize,
    /// Tasks whose tool was in the first five.
    pub top5: usize,
    /// Mean reciprocal rank (0 for a tool not found in the first ten).
    pub mrr: f64,
    /// Tasks.
    pub tasks: usize,
}

impl Quality {
    /// Scores the rank (0 for first) at which each task's tool was found.
    pub fn of(ranks: &[Option<usize>]) -> Self {
        let reciprocal: f64 = ranks
            .iter()
            .map(|r| match r {
                Some(r) if *r < 10 => 1.0 / (*r as f64 + 1.0),
                _ => 0.0,
            })
            .sum();
        Self {
            first: ranks.iter().filter(|r| **r == Some(0)).count(),
            top5: ranks.iter().filter(|r| r.is_some_and(|r| r < 5)).count(),
            mrr: if ranks.is_empty() {
                0.0
            } else {
                reciprocal / ranks.len() as f64
            },
            tasks: ranks.len(),
        }
    }
}

impl std::fmt::Display for Quality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let percent = |n: usize| 100.0 * n as f64 / self.tasks.max(1) as f64;
        write!(
            f,
            "first {}/{} ({:.0} %), top 5 {}/{} ({:.0} %), MRR {:.3}",
            self.first,
            self.tasks,
            percent(self.first),
            self.top5,
            self.tasks,
            percent(self.top5),
            self.mrr
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sets_parse_and_their_names_are_unique() {
        let fixed = fixed();
        let held_out = held_out();
        assert_eq!((fixed.tools.len(), fixed.queries.len()), (30, 30));
        assert!(held_out.queries.len() >= 60);
        let tools = catalog(10_000, varied_distractors);
        assert_eq!(tools.len(), 10_000);
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 10_000, "every name once");
        let warehouse = catalog(10_000, warehouse_distractors);
        let mut names: Vec<&str> = warehouse.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 10_000, "every name once");
    }

    #[test]
    fn quality_counts_first_top5_and_reciprocal_ranks() {
        let q = Quality::of(&[Some(0), Some(1), Some(4), Some(5), None]);
        assert_eq!((q.first, q.top5, q.tasks), (1, 3, 5));
        let mrr = (1.0 + 0.5 + 0.2 + 1.0 / 6.0) / 5.0;
        assert!((q.mrr - mrr).abs() < 1e-9);
    }
}
