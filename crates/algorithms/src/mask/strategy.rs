//! Masking strategies as one open extension point. A strategy is a type implementing
//! [`MaskingStrategy`]: it says what it reads (the dependency graph, the PMI table), what share
//! of a cell's budget its structural phase may fill, and how it fills it; the budget, the
//! uniform top-up and the 80/10/10 replacement are the same for all. [`MaskStrategy`] is the
//! handle configs and checkpoints carry (serialized as the strategy's name).
//!
//! Adding one: a file with the type and its `impl MaskingStrategy`, plus its line in
//! [`BUILTIN`] (or, from outside this crate, one call to [`register`]).

use std::fmt;
use std::sync::RwLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::strategies::StructuralPhase;
use super::MaskParams;

/// How a strategy chooses the structured part of a cell's masked positions.
pub trait MaskingStrategy: Send + Sync + 'static {
    /// The name configs, flags and reports use (`corrmask`, `pmi-rand`, ...).
    fn name(&self) -> &'static str;

    /// Share of the budget `B` the structural phase may fill: its quota is `⌊B · share⌋`.
    fn structural_share(&self, params: &MaskParams) -> f64;

    /// Whether the structural phase reads the dependency graph: the cell's graph genes are then
    /// indexed in the scratch before it runs, and training refuses to start without a graph
    /// when the share is above 0.
    fn needs_graph(&self) -> bool {
        false
    }

    /// Whether it reads the corpus' PMI table (counted before masking starts).
    fn needs_pmi(&self) -> bool {
        false
    }

    /// Masks up to `phase.quota` positions of `phase.genes`, drawing only from `phase.rng`.
    fn structural(&self, phase: &mut StructuralPhase<'_>);
}

/// The built-in strategies, in the order reports list them. A new built-in strategy is one
/// line here.
pub const BUILTIN: [MaskStrategy; 4] =
    [MaskStrategy::RANDOM, MaskStrategy::PMI, MaskStrategy::PMI_RAND, MaskStrategy::CORRMASK];

/// Strategies registered at run time (by code outside this crate).
static REGISTERED: RwLock<Vec<MaskStrategy>> = RwLock::new(Vec::new());

/// Makes a strategy defined outside this crate known by its name (to configs, flags, the
/// audit and training). Registering a name twice keeps the first.
pub fn register(strategy: &'static dyn MaskingStrategy) {
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    let known = BUILTIN.iter().chain(registered.iter()).any(|s| s.name() == strategy.name());
    if !known {
        registered.push(MaskStrategy(strategy));
    }
}

/// A masking strategy: a cheap copyable handle, compared and serialized by name.
#[derive(Clone, Copy)]
pub struct MaskStrategy(&'static dyn MaskingStrategy);

impl MaskStrategy {
    pub const RANDOM: Self = Self(&super::random::Random);
    pub const PMI: Self = Self(&super::pmi_spans::PMI);
    pub const PMI_RAND: Self = Self(&super::pmi_spans::PMI_RAND);
    pub const CORRMASK: Self = Self(&super::corrmask::CorrMask);

    /// Every known strategy: the built-in ones, then the registered ones.
    pub fn all() -> Vec<Self> {
        let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
        BUILTIN.iter().chain(registered.iter()).copied().collect()
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::all().into_iter().find(|s| s.name() == name)
    }

    /// The known names, comma-separated (for error messages).
    pub fn names() -> String {
        Self::all().iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn get(self) -> &'static dyn MaskingStrategy {
        self.0
    }

    pub fn needs_pmi(self) -> bool {
        self.0.needs_pmi()
    }

    pub fn needs_graph(self) -> bool {
        self.0.needs_graph()
    }
}

impl Default for MaskStrategy {
    fn default() -> Self {
        Self::CORRMASK
    }
}

impl PartialEq for MaskStrategy {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for MaskStrategy {}

impl fmt::Debug for MaskStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for MaskStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for MaskStrategy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for MaskStrategy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown masking strategy '{name}' (known: {})", Self::names()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Twice;

    impl MaskingStrategy for Twice {
        fn name(&self) -> &'static str {
            "registered-twice"
        }
        fn structural_share(&self, _: &MaskParams) -> f64 {
            0.0
        }
        fn structural(&self, _: &mut StructuralPhase<'_>) {}
    }

    struct Shadow;

    impl MaskingStrategy for Shadow {
        fn name(&self) -> &'static str {
            "corrmask"
        }
        fn structural_share(&self, _: &MaskParams) -> f64 {
            0.0
        }
        fn structural(&self, _: &mut StructuralPhase<'_>) {}
    }

    #[test]
    fn strategies_serialize_by_name_and_unknown_names_are_refused_with_the_known_ones() {
        for s in BUILTIN {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.name()));
            assert_eq!(serde_json::from_str::<MaskStrategy>(&json).unwrap(), s);
        }
        let e = serde_json::from_str::<MaskStrategy>("\"nope\"").unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("pmi-rand"), "{e}");
    }

    #[test]
    fn registering_adds_a_name_once_and_never_shadows_a_built_in_strategy() {
        register(&Twice);
        register(&Twice);
        register(&Shadow);
        let all = MaskStrategy::all();
        assert_eq!(all.iter().filter(|s| s.name() == "registered-twice").count(), 1);
        assert_eq!(all.iter().filter(|s| s.name() == "corrmask").count(), 1);
        assert!(std::ptr::addr_eq(MaskStrategy::parse("corrmask").unwrap().get(), MaskStrategy::CORRMASK.get()));
    }
}
