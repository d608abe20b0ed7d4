//! AdamW with clipping by the global gradient norm, over all of a model's parameters at once:
//! the two moments live in two flat buffers, and a step is the backend's fused
//! [`sum_of_squares`](FusedOps::sum_of_squares) and [`adamw_step`](FusedOps::adamw_step) (one
//! parallel pass over every element on the CPU) instead of burn's dozen tensor operations per
//! parameter plus the clipping's two per parameter.
//!
//! The update rule is burn's `AdamW` (same arithmetic and roundings), and checkpoints keep
//! burn's `AdamW` record (each parameter's moments and update count), so a run saved by either
//! optimizer resumes with the other.

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamW, AdamWState, AdaptiveMomentumState, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};
use corrflow_algorithms::nn::clip_coefficient;
use corrflow_model::fused::{fused_enabled, reference, AdamWHyper, AdamWSpec, FusedOps, MomentSlot};
use corrflow_model::CellEncoder;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// burn's `AdamW` optimizer record: each parameter's moments and update count by parameter id.
pub type AdamWRecord<B> = <OptimizerAdaptor<AdamW, CellEncoder<B>, B> as Optimizer<CellEncoder<B>, B>>::Record;

/// One parameter: its id, shape, place in the flat buffers and how many updates it has had.
#[derive(Clone, Debug)]
struct Entry {
    id: ParamId,
    dims: Vec<usize>,
    offset: usize,
    time: usize,
}

impl Entry {
    fn len(&self) -> usize {
        self.dims.iter().product()
    }
}

/// AdamW over flat moment buffers; see the module documentation.
pub struct FlatAdamW<B: AutodiffBackend> {
    hyper: AdamWHyper,
    entries: Vec<Entry>,
    /// The first and second moments of every parameter, end to end in module order (`None`
    /// only while a step holds them).
    moments: Option<(FloatTensor<Inner<B>>, FloatTensor<Inner<B>>)>,
    device: burn::tensor::Device<Inner<B>>,
}

/// The float parameters of a module in module order (a fixed order for the global norm).
struct Layout(Vec<Entry>);

impl<B: Backend> ModuleVisitor<B> for Layout {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let dims = param.val().dims().to_vec();
        let offset = self.0.last().map_or(0, |e| e.offset + e.len());
        self.0.push(Entry { id: param.id, dims, offset, time: 0 });
    }
}

/// Reads each parameter's inner tensor, in module order, for the parameters in `wanted`.
struct ReadParams<'a, B: AutodiffBackend> {
    wanted: &'a std::collections::HashMap<ParamId, usize>,
    values: Vec<Option<FloatTensor<Inner<B>>>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for ReadParams<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(&i) = self.wanted.get(&param.id) {
            self.values[i] = Some(param.val().inner().into_primitive().tensor());
        }
    }
}

/// Puts the updated values in place of the parameters in `updated`.
struct WriteParams<'a, B: AutodiffBackend> {
    updated: &'a std::collections::HashMap<ParamId, usize>,
    values: Vec<Option<FloatTensor<Inner<B>>>>,
}

impl<B: AutodiffBackend> ModuleMapper<B> for WriteParams<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(value) = self.updated.get(&id).and_then(|&i| self.values[i].take()) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let mut new = Tensor::<B, D>::from_inner(Tensor::from_primitive(TensorPrimitive::Float(value)));
        if tensor.is_require_grad() {
            new = new.require_grad();
        }
        Param::from_mapped_value(id, new, mapper)
    }
}

fn remove_grad<B: Backend>(grads: &mut GradientsParams, id: ParamId, rank: usize) -> Option<FloatTensor<B>> {
    fn take<B: Backend, const D: usize>(g: &mut GradientsParams, id: ParamId) -> Option<FloatTensor<B>> {
        g.remove::<B, D>(id).map(|t| t.into_primitive().tensor())
    }
    match rank {
        1 => take::<B, 1>(grads, id),
        2 => take::<B, 2>(grads, id),
        3 => take::<B, 3>(grads, id),
        4 => take::<B, 4>(grads, id),
        _ => None,
    }
}

fn flat_zeros<B: Backend>(n: usize, device: &B::Device) -> FloatTensor<B> {
    Tensor::<B, 1>::zeros([n], device).into_primitive().tensor()
}

impl<B: AutodiffBackend> FlatAdamW<B>
where
    Inner<B>: FusedOps,
{
    /// An optimizer with zero moments for the parameters of `model`, on `device`.
    pub fn new<M: AutodiffModule<B>>(hyper: AdamWHyper, model: &M, device: &B::Device) -> Self {
        let mut layout = Layout(Vec::new());
        model.visit(&mut layout);
        let total = layout.0.last().map_or(0, |e| e.offset + e.len());
        // The inner backend's device of the same place.
        let device = Tensor::<B, 1>::zeros([1], device).inner().device();
        let moments = Some((flat_zeros::<Inner<B>>(total, &device), flat_zeros::<Inner<B>>(total, &device)));
        FlatAdamW { hyper, entries: layout.0, moments, device }
    }

    /// One step at learning rate `lr`: the gradients clipped to a global norm of `max_norm`
    /// (0: not clipped), then the AdamW update of every parameter that has a gradient.
    pub fn step<M: AutodiffModule<B>>(&mut self, lr: f64, model: M, mut grads: GradientsParams, max_norm: f64) -> M {
        let mut index = std::collections::HashMap::new();
        let mut grad_values = Vec::new();
        let mut slots = Vec::new();
        for entry in &mut self.entries {
            if let Some(g) = remove_grad::<Inner<B>>(&mut grads, entry.id, entry.dims.len()) {
                entry.time += 1;
                index.insert(entry.id, grad_values.len());
                grad_values.push(g);
                slots.push(MomentSlot { offset: entry.offset, len: entry.len(), time: entry.time });
            }
        }
        if grad_values.is_empty() {
            return model;
        }
        let mut read = ReadParams::<B> { wanted: &index, values: vec![None; grad_values.len()] };
        model.visit(&mut read);
        let params: Vec<FloatTensor<Inner<B>>> =
            read.values.into_iter().map(|v| v.expect("every parameter with a gradient is in the model")).collect();
        let fused = fused_enabled();
        let squares = if max_norm > 0.0 {
            if fused {
                Inner::<B>::sum_of_squares(&grad_values)
            } else {
                reference::sum_of_squares::<Inner<B>>(&grad_values)
            }
        } else {
            0.0
        };
        let spec = AdamWSpec { hyper: self.hyper, lr, grad_scale: clip_coefficient(squares, max_norm), slots };
        // The flat buffers move into the step, so the CPU kernel updates them in place.
        let (m, v) = self.moments.take().expect("moments are back after every step");
        let (updated, m, v) = if fused {
            Inner::<B>::adamw_step(params, grad_values, m, v, &spec)
        } else {
            reference::adamw_step::<Inner<B>>(params, grad_values, m, v, &spec)
        };
        self.moments = Some((m, v));
        model.map(&mut WriteParams::<B> { updated: &index, values: updated.into_iter().map(Some).collect() })
    }

    /// burn's `AdamW` record of the moments, for the parameters updated at least once.
    pub fn to_record(&self) -> AdamWRecord<B> {
        let mut record = AdamWRecord::<B>::default();
        let (m, v) = self.moments.as_ref().expect("moments are back after every step");
        for e in self.entries.iter().filter(|e| e.time > 0) {
            let span =
                |flat: &FloatTensor<Inner<B>>| flat_tensor::<B>(flat.clone()).slice(e.offset..e.offset + e.len());
            let state = match e.dims.len() {
                1 => adaptor_record::<B, 1>(e, span(m), span(v)),
                2 => adaptor_record::<B, 2>(e, span(m), span(v)),
                3 => adaptor_record::<B, 3>(e, span(m), span(v)),
                4 => adaptor_record::<B, 4>(e, span(m), span(v)),
                _ => continue,
            };
            record.insert(e.id, state);
        }
        record
    }

    /// Takes the moments and update counts from a saved `AdamW` record: parameters it does not
    /// name start afresh. An error when it names a parameter this model does not have, or holds
    /// moments of another size.
    pub fn load_record(&mut self, record: AdamWRecord<B>) -> Result<(), String> {
        let known = self.entries.iter().filter(|e| record.contains_key(&e.id)).count();
        if known != record.len() {
            return Err(format!(
                "the optimizer state holds {} parameters this model does not have",
                record.len() - known
            ));
        }
        let (mut m, mut v) = self
            .moments
            .take()
            .map(|(m, v)| (flat_tensor::<B>(m), flat_tensor::<B>(v)))
            .expect("moments are back after every step");
        let mut outcome = Ok(());
        for e in &mut self.entries {
            let span = e.offset..e.offset + e.len();
            let (time, m_i, v_i) = match record.get(&e.id) {
                None => (0, Tensor::zeros([e.len()], &self.device), Tensor::zeros([e.len()], &self.device)),
                Some(r) => match e.dims.len() {
                    1 => moments_of::<B, 1>(r.clone()),
                    2 => moments_of::<B, 2>(r.clone()),
                    3 => moments_of::<B, 3>(r.clone()),
                    _ => moments_of::<B, 4>(r.clone()),
                },
            };
            if m_i.dims()[0] != e.len() || v_i.dims()[0] != e.len() {
                outcome = Err(format!(
                    "the optimizer state holds {} moments for a parameter of shape {:?}",
                    m_i.dims()[0],
                    e.dims
                ));
                break;
            }
            m = m.slice_assign([span.clone()], m_i);
            v = v.slice_assign([span], v_i);
            e.time = time;
        }
        self.moments = Some((m.into_primitive().tensor(), v.into_primitive().tensor()));
        outcome
    }
}

fn flat_tensor<B: AutodiffBackend>(t: FloatTensor<Inner<B>>) -> Tensor<Inner<B>, 1> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

fn adaptor_record<B: AutodiffBackend, const D: usize>(
    e: &Entry,
    m: Tensor<Inner<B>, 1>,
    v: Tensor<Inner<B>, 1>,
) -> AdaptorRecord<AdamW, B> {
    let dims: [usize; D] = std::array::from_fn(|i| e.dims[i]);
    let momentum = AdaptiveMomentumState::new(e.time, m.reshape(dims), v.reshape(dims));
    AdaptorRecord::from_state::<D>(AdamWState { momentum })
}

/// A record's update count and flattened moments.
fn moments_of<B: AutodiffBackend, const D: usize>(
    record: AdaptorRecord<AdamW, B>,
) -> (usize, Tensor<Inner<B>, 1>, Tensor<Inner<B>, 1>) {
    let state: AdamWState<Inner<B>, D> = record.into_state::<D>();
    let s = state.momentum;
    let flat = |t: Tensor<Inner<B>, D>| {
        let n = t.dims().iter().product::<usize>();
        t.reshape([n])
    };
    (s.time, flat(s.moment_1), flat(s.moment_2))
}

#[cfg(test)]
mod tests;
