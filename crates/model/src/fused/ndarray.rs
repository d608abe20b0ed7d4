//! The CPU trainer's fused kernels (`corrflow_algorithms::nn`) behind [`FusedOps`] for burn's
//! ndarray backend. Inputs are read in place (contiguous f32 arrays); outputs are new arrays.

use std::borrow::Cow;

use burn::backend::ndarray::NdArrayTensor;
use burn::backend::NdArray;
use burn::tensor::ops::{FloatTensor, FloatTensorOps};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use corrflow_algorithms::nn::{
    adamw_update, add_layer_norm_backward, add_layer_norm_forward, attention_backward, attention_forward,
    decoder_nll_backward, decoder_nll_forward, linear_backward, linear_forward, split_spans, sum_of_squares,
    AdamWSegment, AttentionStats, LinearShape,
};

use super::{AdamWSpec, AttentionSpec, DecoderSpec, FusedOps, LayerNormSpec};

type Cpu = NdArray<f32>;

/// The tensor's elements in row-major order: borrowed when it is a contiguous f32 array (the
/// usual case, and the kernels' inputs are often shared with the autodiff graph, where burn's
/// `into_data` would copy element by element), copied otherwise.
fn host(t: &FloatTensor<Cpu>) -> Cow<'_, [f32]> {
    if let NdArrayTensor::F32(storage) = t {
        if let Some(slice) = storage.view().to_slice() {
            return Cow::Borrowed(slice);
        }
    }
    let data = Tensor::<Cpu, 1>::from_primitive(TensorPrimitive::Float(t.clone())).into_data();
    // The trainer's tensors are f32; a conversion covers any other float type.
    Cow::Owned(data.convert::<f32>().into_vec::<f32>().unwrap_or_default())
}

fn from_vec(v: Vec<f32>, shape: Vec<usize>) -> FloatTensor<Cpu> {
    Cpu::float_from_data(TensorData::new(v, shape), &Default::default())
}

/// The tensor as a writable, standard-layout f32 array: its own array when nothing else refers to
/// it (the optimizer's moments, which it moves in), a copy otherwise (the parameters, which the
/// model still holds during the step).
fn writable(t: FloatTensor<Cpu>) -> ndarray::ArcArray<f32, ndarray::IxDyn> {
    let array = match t {
        NdArrayTensor::F32(storage) => storage.into_owned(),
        other => {
            let shape = ndarray::IxDyn(&burn::tensor::TensorMetadata::shape(&other).to_vec());
            let values = host(&other).into_owned();
            ndarray::ArcArray::from_shape_vec(shape, values).expect("a tensor's shape matches its elements")
        }
    };
    if array.is_standard_layout() {
        array
    } else {
        array.as_standard_layout().into_owned().into_shared()
    }
}

fn slice_mut(array: &mut ndarray::ArcArray<f32, ndarray::IxDyn>) -> &mut [f32] {
    array.as_slice_mut().expect("writable() gives standard-layout arrays")
}

impl FusedOps for Cpu {
    fn sum_of_squares(tensors: &[FloatTensor<Self>]) -> f64 {
        let hosts: Vec<Cow<'_, [f32]>> = tensors.iter().map(host).collect();
        let parts: Vec<&[f32]> = hosts.iter().map(|h| h.as_ref()).collect();
        sum_of_squares(&parts)
    }

    fn adamw_step(
        params: Vec<FloatTensor<Self>>,
        grads: Vec<FloatTensor<Self>>,
        moment_1: FloatTensor<Self>,
        moment_2: FloatTensor<Self>,
        spec: &AdamWSpec,
    ) -> (Vec<FloatTensor<Self>>, FloatTensor<Self>, FloatTensor<Self>) {
        let mut params: Vec<_> = params.into_iter().map(writable).collect();
        let (mut m, mut v) = (writable(moment_1), writable(moment_2));
        let grads: Vec<Cow<'_, [f32]>> = grads.iter().map(host).collect();
        let spans: Vec<(usize, usize)> = spec.slots.iter().map(|s| (s.offset, s.len)).collect();
        let segments = params
            .iter_mut()
            .zip(&grads)
            .zip(split_spans(slice_mut(&mut m), &spans))
            .zip(split_spans(slice_mut(&mut v), &spans))
            .zip(&spec.slots)
            .map(|((((p, g), m), v), slot)| AdamWSegment {
                param: slice_mut(p),
                grad: g,
                moment_1: m,
                moment_2: v,
                constants: spec.constants(slot),
            })
            .collect();
        adamw_update(segments);
        (params.into_iter().map(NdArrayTensor::from).collect(), NdArrayTensor::from(m), NdArrayTensor::from(v))
    }

    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        spec: &AttentionSpec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let s = spec.shape;
        let stats = attention_forward(s, &host(&q), &host(&k), &host(&v), &spec.valid, spec.dropout);
        (
            from_vec(stats.out, vec![s.batch, s.len, s.heads * s.head_dim]),
            from_vec(stats.lse, vec![s.batch, s.heads, s.len]),
        )
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        out: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: &AttentionSpec,
    ) -> [FloatTensor<Self>; 3] {
        let s = spec.shape;
        let fwd = AttentionStats { out: host(&out).into_owned(), lse: host(&lse).into_owned() };
        let g = attention_backward(s, &host(&q), &host(&k), &host(&v), &fwd, &host(&grad), &spec.valid, spec.dropout);
        let shape = vec![s.batch, s.len, s.heads * s.head_dim];
        [from_vec(g.q, shape.clone()), from_vec(g.k, shape.clone()), from_vec(g.v, shape)]
    }

    fn decoder_nll_forward(
        y: FloatTensor<Self>,
        emb: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        spec: &DecoderSpec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, Vec<u32>) {
        let s = spec.shape;
        let f = decoder_nll_forward(s, &host(&y), &host(&emb), &host(&bias), &spec.targets);
        (from_vec(f.nll, vec![s.rows]), from_vec(f.lse, vec![s.rows]), f.argmax)
    }

    fn decoder_nll_backward(
        y: FloatTensor<Self>,
        emb: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: &DecoderSpec,
    ) -> [FloatTensor<Self>; 3] {
        let s = spec.shape;
        let g = decoder_nll_backward(s, &host(&y), &host(&emb), &host(&bias), &spec.targets, &host(&lse), &host(&grad));
        [
            from_vec(g.y, vec![s.rows, s.hidden]),
            from_vec(g.emb, vec![s.vocab, s.hidden]),
            from_vec(g.bias, vec![s.vocab]),
        ]
    }

    fn add_layer_norm_forward(
        x: FloatTensor<Self>,
        r: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        spec: &LayerNormSpec,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let f = add_layer_norm_forward(spec.width, &host(&x), &host(&r), &host(&gamma), &host(&beta), spec.eps);
        let rows = f.mean.len();
        (from_vec(f.y, vec![rows, spec.width]), from_vec(f.mean, vec![rows]), from_vec(f.rstd, vec![rows]))
    }

    fn add_layer_norm_backward(
        x: FloatTensor<Self>,
        r: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        spec: &LayerNormSpec,
    ) -> [FloatTensor<Self>; 3] {
        let g = add_layer_norm_backward(
            spec.width,
            &host(&x),
            &host(&r),
            &host(&gamma),
            &host(&mean),
            &host(&rstd),
            &host(&grad),
        );
        let rows = g.z.len() / spec.width;
        [from_vec(g.z, vec![rows, spec.width]), from_vec(g.gamma, vec![spec.width]), from_vec(g.beta, vec![spec.width])]
    }

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        shape: LinearShape,
    ) -> FloatTensor<Self> {
        from_vec(linear_forward(shape, &host(&x), &host(&w), &host(&b)), vec![shape.rows, shape.outputs])
    }

    fn linear_backward(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        shape: LinearShape,
    ) -> [FloatTensor<Self>; 3] {
        let g = linear_backward(shape, &host(&x), &host(&w), &host(&grad));
        [
            from_vec(g.x, vec![shape.rows, shape.inputs]),
            from_vec(g.w, vec![shape.inputs, shape.outputs]),
            from_vec(g.b, vec![shape.outputs]),
        ]
    }
}
