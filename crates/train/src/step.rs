//! Per-phase wall time of one optimisation step.

use std::time::Instant;

use burn::tensor::backend::Backend;

/// Wall time of the phases of one training step (prepare, forward, backward, optimizer),
/// with a device sync at the end of each. The syncs stop host and device work from overlapping,
/// so a profiled step is slower: this finds where a step's time goes, it does not measure speed.
pub struct StepPhases {
    on: bool,
    last: Instant,
    ms: Vec<(&'static str, f64)>,
}

impl StepPhases {
    pub fn start(on: bool, now: Instant) -> Self {
        StepPhases { on, last: now, ms: Vec::new() }
    }

    pub fn mark<B: Backend>(&mut self, phase: &'static str, device: &B::Device) {
        if self.on {
            // A failed sync shows up again at the next read of a tensor; here it only ends the phase.
            let _ = B::sync(device);
            let now = Instant::now();
            self.ms.push((phase, (now - self.last).as_secs_f64() * 1e3));
            self.last = now;
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        self.ms.iter().map(|&(k, v)| (k.to_string(), serde_json::Value::from(v))).collect()
    }
}
