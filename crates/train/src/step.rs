//! The pieces of one optimisation step the trainer times and checks: per-phase wall time and
//! clipping by the global gradient norm in a fixed parameter order.

use std::time::Instant;

use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::Tensor;
use corrflow_model::CellEncoder;

/// Wall time of the phases of one training step (prepare, forward, backward, clip, optimizer),
/// with a device sync at the end of each. The syncs stop host and device work from overlapping,
/// so a profiled step is slower: this finds where a step's time goes, it does not measure speed.
pub(crate) struct StepPhases {
    on: bool,
    last: Instant,
    ms: Vec<(&'static str, f64)>,
}

impl StepPhases {
    pub(crate) fn start(on: bool, now: Instant) -> Self {
        StepPhases { on, last: now, ms: Vec::new() }
    }

    pub(crate) fn mark<B: Backend>(&mut self, phase: &'static str, device: &B::Device) {
        if self.on {
            // A failed sync shows up again at the next read of a tensor; here it only ends the phase.
            let _ = B::sync(device);
            let now = Instant::now();
            self.ms.push((phase, (now - self.last).as_secs_f64() * 1e3));
            self.last = now;
        }
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        self.ms.iter().map(|&(k, v)| (k.to_string(), serde_json::Value::from(v))).collect()
    }
}

/// Parameter ids in module order: a fixed order for reductions over all gradients.
struct ParamOrder(Vec<(burn::module::ParamId, usize)>);

impl<B: Backend> burn::module::ModuleVisitor<B> for ParamOrder {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<burn::tensor::Tensor<B, D>>) {
        self.0.push((param.id, D));
    }
}

/// Scales all gradients by `min(1, max_norm / ‖g‖)`, ‖g‖ the norm of all of them together,
/// summed in module order (deterministic, unlike a hash-map order).
pub(crate) fn clip_global_norm<B: AutodiffBackend>(model: &CellEncoder<B>, grads: &mut GradientsParams, max_norm: f64) {
    fn sq<BI: Backend, const D: usize>(g: &GradientsParams, id: burn::module::ParamId) -> Option<Tensor<BI, 1>> {
        g.get::<BI, D>(id).map(|t| t.square().sum())
    }
    fn scale<BI: Backend, const D: usize>(g: &mut GradientsParams, id: burn::module::ParamId, c: f64) {
        if let Some(t) = g.remove::<BI, D>(id) {
            g.register::<BI, D>(id, t.mul_scalar(c));
        }
    }
    let mut order = ParamOrder(Vec::new());
    burn::module::Module::<B>::visit(model, &mut order);
    let squares: Vec<Tensor<B::InnerBackend, 1>> = order
        .0
        .iter()
        .filter_map(|&(id, d)| match d {
            1 => sq::<B::InnerBackend, 1>(grads, id),
            2 => sq::<B::InnerBackend, 2>(grads, id),
            3 => sq::<B::InnerBackend, 3>(grads, id),
            _ => None,
        })
        .collect();
    if squares.is_empty() {
        return;
    }
    // One read-back for all parameters (on a GPU each read is a device sync), then the same
    // f64 sum in module order as reading them one by one.
    let total: f64 = Tensor::cat(squares, 0).into_data().iter::<f64>().sum();
    let coef = max_norm / (total.sqrt() + 1e-6);
    if coef < 1.0 {
        for &(id, d) in &order.0 {
            match d {
                1 => scale::<B::InnerBackend, 1>(grads, id, coef),
                2 => scale::<B::InnerBackend, 2>(grads, id, coef),
                3 => scale::<B::InnerBackend, 3>(grads, id, coef),
                _ => {}
            }
        }
    }
}
