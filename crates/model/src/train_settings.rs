//! `train` of a checkpoint's state: the settings of the run that wrote it, kept as written.
//!
//! The trainer owns `[train]` (`corrflow_train::TrainConfig`) and reads these settings whole
//! when it resumes a run; below it, loading a model for inference or export needs one of them,
//! `max_len`. So the model crate keeps them as a JSON object in their written order (serde_json's
//! `preserve_order` is on in the workspace), and a checkpoint's bytes do not depend on which
//! crate holds the type.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TrainSettings(Map<String, Value>);

impl TrainSettings {
    /// The settings of a run, from the trainer's configuration (any type serializing to an
    /// object).
    pub fn of<T: Serialize>(config: &T) -> Result<Self, serde_json::Error> {
        match serde_json::to_value(config)? {
            Value::Object(map) => Ok(Self(map)),
            other => Err(serde::ser::Error::custom(format!("train settings must be an object, not {other}"))),
        }
    }

    /// What an imported model knows of its training: the longest sequence it saw (0: its
    /// positions' limit).
    pub fn with_max_len(max_len: usize) -> Self {
        let mut map = Map::new();
        map.insert("max_len".into(), max_len.into());
        Self(map)
    }

    /// `max_len` as recorded (0 when absent: no limit below the model's positions).
    pub fn max_len(&self) -> usize {
        self.0.get("max_len").and_then(Value::as_u64).map_or(0, |n| n as usize)
    }

    /// The settings read back into the trainer's configuration; settings it does not record
    /// take that type's defaults.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(Value::Object(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Config {
        lr: f64,
        max_len: usize,
        seed: u64,
    }

    impl Default for Config {
        fn default() -> Self {
            Self { lr: 1e-3, max_len: 0, seed: 7 }
        }
    }

    #[test]
    fn settings_keep_their_bytes_and_order_and_read_back() {
        let c = Config { lr: 2.5e-4, max_len: 512, seed: 3 };
        let s = TrainSettings::of(&c).unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), serde_json::to_string(&c).unwrap());
        assert_eq!(s.max_len(), 512);
        assert_eq!(s.parse::<Config>().unwrap(), c);
        let back: TrainSettings = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn an_import_records_max_len_and_the_rest_reads_as_defaults() {
        let s = TrainSettings::with_max_len(256);
        assert_eq!(s.max_len(), 256);
        assert_eq!(s.parse::<Config>().unwrap(), Config { max_len: 256, ..Config::default() });
        assert_eq!(TrainSettings::default().max_len(), 0);
        assert!(TrainSettings::of(&3u32).is_err());
    }
}
