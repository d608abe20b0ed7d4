//! A small builder for ONNX graphs: named initializers, single-output nodes with generated
//! names, and the attribute constructors the encoder graph needs.

use super::proto::{
    attr_type, dtype, AttributeProto, Dimension, DimensionValue, GraphProto, NodeProto, TensorProto, TensorShapeProto,
    TensorTypeProto, TypeProto, ValueInfoProto,
};

#[derive(Default)]
pub struct GraphBuilder {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    next: usize,
}

impl GraphBuilder {
    /// A float initializer (weights), row-major.
    pub fn weight(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        debug_assert_eq!(dims.iter().product::<usize>(), values.len(), "{name}");
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(name, dims, dtype::FLOAT, raw)
    }

    /// An int64 initializer (shapes, axes, indices).
    pub fn ints(&mut self, name: &str, dims: &[usize], values: &[i64]) -> String {
        let raw = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.initializer(name, dims, dtype::INT64, raw)
    }

    /// A float scalar constant.
    pub fn scalar(&mut self, name: &str, value: f32) -> String {
        self.weight(name, &[], &[value])
    }

    fn initializer(&mut self, name: &str, dims: &[usize], data_type: i32, raw_data: Vec<u8>) -> String {
        self.initializers.push(TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type,
            name: name.to_string(),
            raw_data,
        });
        name.to_string()
    }

    /// Adds `op(inputs)` and returns the name of its output.
    pub fn op(&mut self, op: &str, inputs: &[&str], attribute: Vec<AttributeProto>) -> String {
        self.next += 1;
        let out = format!("{}_{}", op.to_lowercase(), self.next);
        self.op_named(op, inputs, attribute, &out)
    }

    /// Adds `op(inputs)` writing to the given output name.
    pub fn op_named(&mut self, op: &str, inputs: &[&str], attribute: Vec<AttributeProto>, out: &str) -> String {
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.to_string()],
            name: format!("{op}:{out}"),
            op_type: op.to_string(),
            attribute,
            domain: String::new(),
        });
        out.to_string()
    }

    /// `x·w + b` for a weight `[in, out]` (burn's Linear layout) and bias `[out]`.
    pub fn linear(&mut self, x: &str, w: &str, b: Option<&str>) -> String {
        let y = self.op("MatMul", &[x, w], vec![]);
        match b {
            Some(b) => self.op("Add", &[&y, b], vec![]),
            None => y,
        }
    }

    pub fn finish(self, name: &str, input: Vec<ValueInfoProto>, output: Vec<ValueInfoProto>) -> GraphProto {
        GraphProto {
            node: self.nodes,
            name: name.to_string(),
            initializer: self.initializers,
            doc_string: String::new(),
            input,
            output,
        }
    }
}

pub fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto { name: name.into(), i, r#type: attr_type::INT, ..Default::default() }
}

pub fn attr_ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto { name: name.into(), ints: ints.to_vec(), r#type: attr_type::INTS, ..Default::default() }
}

pub fn attr_float(name: &str, f: f32) -> AttributeProto {
    AttributeProto { name: name.into(), f, r#type: attr_type::FLOAT, ..Default::default() }
}

/// A tensor-valued graph input or output; `None` dims are symbolic (named).
pub fn value_info(name: &str, elem_type: i32, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Ok(v) => DimensionValue::DimValue(*v),
                Err(p) => DimensionValue::DimParam(p.to_string()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto { elem_type, shape: Some(TensorShapeProto { dim }) }),
        }),
        doc_string: String::new(),
    }
}
