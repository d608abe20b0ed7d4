//! Stored values of a chunk, kept in the width the file stores them: AnnData counts are
//! usually f32, and widening them to f64 in the reader cost a pass over every value and twice
//! the memory per chunk. Consumers widen (exactly) as they read.

use std::ops::Range;

/// The stored values of a chunk's cells.
#[derive(Clone, Debug, PartialEq)]
pub enum ChunkValues {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Default for ChunkValues {
    fn default() -> Self {
        Self::F64(Vec::new())
    }
}

impl ChunkValues {
    /// All the values, as one cell's would be.
    pub fn all(&self) -> CellValues<'_> {
        match self {
            Self::F32(v) => CellValues::F32(v),
            Self::F64(v) => CellValues::F64(v),
        }
    }

    pub fn len(&self) -> usize {
        self.all().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, k: usize) -> f64 {
        self.all().get(k)
    }

    /// Appends a value, widening f32 storage to f64 first if needed (readers that push value by
    /// value start from the f64 default, so this never happens on their path).
    pub fn push(&mut self, value: f64) {
        if let Self::F32(v) = self {
            *self = Self::F64(v.iter().map(|&x| f64::from(x)).collect());
        }
        if let Self::F64(v) = self {
            v.push(value);
        }
    }

    pub fn slice(&self, r: Range<usize>) -> CellValues<'_> {
        match self.all() {
            CellValues::F32(v) => CellValues::F32(&v[r]),
            CellValues::F64(v) => CellValues::F64(&v[r]),
        }
    }
}

/// The stored values of one cell.
#[derive(Clone, Copy, Debug)]
pub enum CellValues<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl CellValues<'_> {
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, k: usize) -> f64 {
        match self {
            Self::F32(v) => f64::from(v[k]),
            Self::F64(v) => v[k],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_values_read_back_exactly_as_f64_and_pushing_widens_them() {
        let mut v = ChunkValues::F32(vec![1.0, 0.1, 3.0e38]);
        assert_eq!(v.slice(1..3).get(0), f64::from(0.1f32));
        assert_eq!(v.get(2), f64::from(3.0e38f32));
        v.push(0.1);
        assert_eq!(v, ChunkValues::F64(vec![1.0, f64::from(0.1f32), f64::from(3.0e38f32), 0.1]));
        assert_eq!(v.slice(0..4).len(), 4);
    }
}
