//! Pre-flight memory estimates (`corrflow_infer::model_meta::memory`, plain data so the server
//! uses them too), tested here against the built model.

pub use corrflow_infer::model_meta::memory::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init::InitModel;
    use burn::module::Module;
    use corrflow_infer::model_meta::ModelConfig;

    #[test]
    fn the_parameter_count_is_the_built_models() {
        for objective in ["mlm", "wced"] {
            let m = ModelConfig {
                hidden: 32,
                ffn: 48,
                heads: 4,
                layers: 3,
                max_positions: 40,
                objective: objective.into(),
                ..ModelConfig::default()
            };
            let built = m.init::<crate::CpuBackend>(100, &Default::default());
            assert_eq!(parameters(&m, 100), built.num_params() as u128, "{objective}");
            // With a hierarchical head over 3 leaves.
            let term = |id: &str, parents: &[&str]| corrflow_algorithms::ontology::Term {
                id: id.into(),
                label: id.into(),
                synonyms: vec![],
                parents: parents.iter().map(|p| p.to_string()).collect(),
            };
            let terms = vec![term("a", &[]), term("b", &["a"]), term("c", &["a"]), term("d", &["a"])];
            let hce = corrflow_infer::model_meta::OntologyHead {
                ontology_version: "t".into(),
                column: "cl_id".into(),
                weight: 1.0,
                warmup_steps: 0,
                pooling: Default::default(),
                leaves: corrflow_infer::model_meta::OntologyHead::leaf_ids(&terms),
                terms,
            };
            let m = ModelConfig { hce: Some(hce), ..m };
            let built = m.init::<crate::CpuBackend>(100, &Default::default());
            assert_eq!(parameters(&m, 100), built.num_params() as u128, "{objective} + hce");
        }
    }

    #[test]
    fn estimates_grow_with_the_batch_and_the_model_and_absurd_sizes_are_refused() {
        let m = ModelConfig::default();
        let small = training_bytes(&m, 25_426, 8, 256);
        assert!(training_bytes(&m, 25_426, 16, 256) > small);
        let huge = ModelConfig { hidden: 1_000_000, ..m.clone() };
        let e = check("training", training_bytes(&huge, 25_426, 8, 256), "model.hidden").unwrap_err().to_string();
        assert!(e.contains("model.hidden") && e.contains("available"), "{e}");
        assert!(check("training", small, "x").is_ok());
    }
}
