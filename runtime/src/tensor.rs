//! `Tensor<T>`: a shape and contiguous row-major storage, on the host or on a rank's device.
//!
//! Storage is an enum, so device memory (the NCCL backend's) is one more variant, not a second
//! tensor type: communication code asks for raw buffers and the [`Device`] they live on, and
//! host access to a device tensor is a copy (`to_vec`, `to_host`), never a pointer.

use std::fmt;

use crate::DType;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::heap::HostMem;
use crate::model::{Shape, ShapeFmt};

/// Where a tensor's data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    /// Ordinary host memory.
    Host,
    /// Memory of CUDA device `n` (NCCL backend).
    Cuda(u32),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Host => write!(f, "host"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Memory on a device, provided by the backend that owns the device (`Backend::alloc_device`).
/// Its address is meaningful only to that backend; everyone else copies through `read` and
/// `write`, which also order themselves after the backend's pending work on the memory.
pub(crate) trait DeviceMemory: Send + Sync {
    /// Where it is.
    fn device(&self) -> Device;
    /// Its size in bytes.
    fn len(&self) -> usize;
    /// The address the owning backend passes to its device calls.
    fn addr(&self) -> *mut u8;
    /// Copies all of it into `into` (`into.len() == self.len()`).
    fn read(&self, into: &mut [u8]) -> Result<()>;
    /// Overwrites all of it with `from` (`from.len() == self.len()`).
    fn write(&mut self, from: &[u8]) -> Result<()>;
    /// A new allocation on the same device holding the same bytes.
    fn duplicate(&self) -> Result<Box<dyn DeviceMemory>>;
}

enum Storage<T: Element> {
    Host(HostMem<T>),
    Device(Box<dyn DeviceMemory>),
}

/// A dense, row-major tensor of `T`, on the host or on a device.
///
/// Tensors made by [`Tensor`]'s constructors live on the host. Tensors made by a `Ctx`
/// (`ctx.full`, `ctx.zeros`, `ctx.tensor`, `ctx.to_device`) live on the rank's device: the host
/// under the threads and MPI backends, the rank's GPU under NCCL (`cuda:r`; emulated under
/// `nccl-host`). A device tensor's elements are read by copying them (`to_vec`, `to_host`,
/// printing); `as_slice`/`as_mut_slice` are for host tensors.
///
/// A host tensor that rankwise allocates (the constructors, `try_clone`, `to_host`) starts on
/// a 64-byte cache line, where the collectives' vector loops run fastest; one made from your
/// own `Vec` (`from_vec`, `From<Vec>`) or from an `ndarray` array keeps a `Vec`'s placement,
/// and `into_vec` of an allocated one copies its elements into a new `Vec`.
pub struct Tensor<T: Element> {
    shape: Shape,
    storage: Storage<T>,
}

impl<T: Element> Clone for Tensor<T> {
    /// A copy on the same device.
    ///
    /// # Panics
    ///
    /// Only if the device fails while copying (a lost GPU); [`Tensor::try_clone`] returns that
    /// as an `Err`.
    fn clone(&self) -> Self {
        self.try_clone().unwrap_or_else(|e| panic!("{e}"))
    }
}

impl<T: Element> PartialEq for Tensor<T> {
    /// Same shape, device and elements (a device tensor's elements are copied to compare; an
    /// unreadable one equals nothing).
    fn eq(&self, other: &Self) -> bool {
        if self.shape != other.shape || self.device() != other.device() {
            return false;
        }
        match (&self.storage, &other.storage) {
            (Storage::Host(a), Storage::Host(b)) => **a == **b,
            _ => match (self.try_to_vec(), other.try_to_vec()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            },
        }
    }
}

/// Number of elements of `shape` holding `T`s, or an error if the tensor could not exist: more
/// elements than `usize` counts, or more bytes than an allocation may have (`isize::MAX`).
pub(crate) fn checked_numel<T>(shape: &[usize]) -> Result<usize> {
    let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    let bytes = numel.and_then(|n| n.checked_mul(std::mem::size_of::<T>()));
    match (numel, bytes) {
        (Some(n), Some(b)) if b <= isize::MAX as usize => Ok(n),
        _ => Err(Error::Tensor(format!(
            "shape {} of {} is larger than any allocation can be ({} bytes at most)",
            ShapeFmt(shape),
            std::any::type_name::<T>(),
            isize::MAX
        ))),
    }
}

/// An empty vector with room for `numel` elements: allocation failure is an `Err`, not an
/// abort of the whole process.
fn allocate<T>(shape: &[usize], numel: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(numel)
        .map_err(|_| cannot_allocate::<T>(shape, numel))?;
    Ok(v)
}

fn cannot_allocate<T>(shape: &[usize], numel: usize) -> Error {
    Error::Tensor(format!(
        "cannot allocate a tensor of shape {} ({} bytes): out of memory",
        ShapeFmt(shape),
        numel.saturating_mul(std::mem::size_of::<T>())
    ))
}

/// `numel` elements, each `f(i)`, where new host tensors live (see `heap`).
fn build<T: Element>(
    shape: &[usize],
    numel: usize,
    f: impl FnMut(usize) -> T,
) -> Result<HostMem<T>> {
    HostMem::build(numel, f).map_err(|_| cannot_allocate::<T>(shape, numel))
}

impl<T: Element> Tensor<T> {
    /// A tensor of `shape` holding `data` in row-major order.
    pub fn from_vec(shape: impl AsRef<[usize]>, data: Vec<T>) -> Result<Self> {
        let shape = shape.as_ref();
        let numel = checked_numel::<T>(shape)?;
        if numel != data.len() {
            return Err(Error::Tensor(format!(
                "shape {} holds {numel} element(s) but {} were given",
                ShapeFmt(shape),
                data.len()
            )));
        }
        Ok(Tensor {
            shape: Shape::from_slice(shape),
            storage: Storage::Host(HostMem::Vec(data)),
        })
    }

    /// A tensor of `shape` with every element `value`.
    pub fn full(shape: impl AsRef<[usize]>, value: T) -> Result<Self> {
        let shape = shape.as_ref();
        let numel = checked_numel::<T>(shape)?;
        Ok(Tensor {
            shape: Shape::from_slice(shape),
            storage: Storage::Host(build(shape, numel, |_| value)?),
        })
    }

    /// A tensor of `shape` filled with zeros.
    pub fn zeros(shape: impl AsRef<[usize]>) -> Result<Self> {
        Tensor::full(shape, T::default())
    }

    /// A tensor of zeros with `like`'s shape (`torch.zeros_like`).
    pub fn zeros_like(like: &Tensor<T>) -> Result<Self> {
        Self::zeros(like.shape())
    }

    /// A tensor whose element at multi-index `idx` is `f(idx)`.
    pub fn from_fn(shape: impl AsRef<[usize]>, mut f: impl FnMut(&[usize]) -> T) -> Result<Self> {
        let shape = shape.as_ref();
        let numel = checked_numel::<T>(shape)?;
        let mut idx = vec![0usize; shape.len()];
        let data = build(shape, numel, |_| {
            let x = f(&idx);
            for d in (0..shape.len()).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
            x
        })?;
        Ok(Tensor {
            shape: Shape::from_slice(shape),
            storage: Storage::Host(data),
        })
    }

    /// The extent of each dimension.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        match &self.storage {
            Storage::Host(v) => v.len(),
            Storage::Device(m) => m.len() / std::mem::size_of::<T>(),
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        match &self.storage {
            Storage::Host(_) => Device::Host,
            Storage::Device(m) => m.device(),
        }
    }

    /// The error for host access to a device tensor.
    fn not_on_host(&self, what: &str) -> Error {
        Error::Tensor(format!(
            "{what} needs a host tensor, but this {} tensor of shape {} lives on {} (tensors a \
             `Ctx` makes live on the rank's device): read it with `to_vec()`, or copy it with \
             `to_host()`",
            T::DTYPE,
            ShapeFmt(&self.shape),
            self.device()
        ))
    }

    /// The elements in row-major order (host tensors only: a device tensor is an `Err`).
    pub fn as_slice(&self) -> Result<&[T]> {
        match &self.storage {
            Storage::Host(v) => Ok(v),
            Storage::Device(_) => Err(self.not_on_host("as_slice")),
        }
    }

    /// The elements in row-major order, mutably (host tensors only: a device tensor is an
    /// `Err`).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        if matches!(self.storage, Storage::Device(_)) {
            return Err(self.not_on_host("as_mut_slice"));
        }
        match &mut self.storage {
            Storage::Host(v) => Ok(v),
            Storage::Device(_) => Err(Error::Internal("checked above".into())),
        }
    }

    /// A copy of the elements in row-major order, wherever they live.
    ///
    /// # Panics
    ///
    /// Only if the device fails while copying (a lost GPU); [`Tensor::try_to_vec`] returns
    /// that as an `Err`.
    pub fn to_vec(&self) -> Vec<T> {
        self.try_to_vec().unwrap_or_else(|e| panic!("{e}"))
    }

    /// A copy of the elements in row-major order, wherever they live; a device that fails
    /// while copying is an `Err`.
    pub fn try_to_vec(&self) -> Result<Vec<T>> {
        match &self.storage {
            Storage::Host(v) => Ok(v.to_vec()),
            Storage::Device(m) => {
                let mut v = allocate(&self.shape, self.numel())?;
                v.resize(self.numel(), T::default());
                m.read(as_bytes_mut(&mut v))?;
                Ok(v)
            }
        }
    }

    /// The elements in row-major order, wherever they live.
    ///
    /// # Panics
    ///
    /// As [`Tensor::to_vec`].
    pub fn into_vec(self) -> Vec<T> {
        match self.storage {
            Storage::Host(v) => v.into_vec(),
            Storage::Device(_) => self.to_vec(),
        }
    }

    /// The same tensor on the host (a copy).
    pub fn to_host(&self) -> Result<Tensor<T>> {
        match &self.storage {
            Storage::Host(_) => self.try_clone(),
            Storage::Device(m) => {
                // Read straight into a host block, placed as a new host tensor would be.
                let mut host = build(&self.shape, self.numel(), |_| T::default())?;
                m.read(as_bytes_mut(&mut host))?;
                Ok(Tensor {
                    shape: self.shape.clone(),
                    storage: Storage::Host(host),
                })
            }
        }
    }

    /// A copy on the same device; a device that fails while copying is an `Err`.
    pub fn try_clone(&self) -> Result<Tensor<T>> {
        Ok(Tensor {
            shape: self.shape.clone(),
            storage: match &self.storage {
                Storage::Host(v) => Storage::Host(
                    v.duplicate()
                        .map_err(|_| cannot_allocate::<T>(&self.shape, self.numel()))?,
                ),
                Storage::Device(m) => Storage::Device(m.duplicate()?),
            },
        })
    }

    /// Sets every element to `value`.
    ///
    /// # Panics
    ///
    /// Only if the device fails while writing (a lost GPU); [`Tensor::try_fill`] returns that
    /// as an `Err`.
    pub fn fill(&mut self, value: T) {
        self.try_fill(value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Sets every element to `value`; a device that fails while writing is an `Err`.
    pub fn try_fill(&mut self, value: T) -> Result<()> {
        match &mut self.storage {
            Storage::Host(v) => {
                v.fill(value);
                Ok(())
            }
            Storage::Device(_) => {
                let mut v = allocate(&self.shape, self.numel())?;
                v.resize(self.numel(), value);
                self.write_bytes(as_bytes(&v))
            }
        }
    }

    /// `host` moved onto the device memory `mem` (which holds exactly its bytes).
    pub(crate) fn on_device(host: Tensor<T>, mut mem: Box<dyn DeviceMemory>) -> Result<Self> {
        mem.write(as_bytes(host.as_slice()?))?;
        Ok(Tensor {
            shape: host.shape,
            storage: Storage::Device(mem),
        })
    }

    /// The same data with another shape of the same element count.
    pub fn reshape(mut self, shape: impl AsRef<[usize]>) -> Result<Self> {
        let shape = shape.as_ref();
        if checked_numel::<T>(shape)? != self.numel() {
            return Err(Error::Tensor(format!(
                "cannot reshape {} ({} elements) to {}",
                ShapeFmt(&self.shape),
                self.numel(),
                ShapeFmt(shape)
            )));
        }
        self.shape = Shape::from_slice(shape);
        Ok(self)
    }

    /// The buffer the backends move data through: its address (a device address for a device
    /// tensor) and element count.
    pub(crate) fn raw(&self) -> (*const T, usize) {
        match &self.storage {
            Storage::Host(v) => (v.as_ptr(), v.len()),
            Storage::Device(m) => (m.addr().cast_const().cast(), self.numel()),
        }
    }

    /// Mutable counterpart of [`Tensor::raw`].
    pub(crate) fn raw_mut(&mut self) -> (*mut T, usize) {
        let numel = self.numel();
        match &mut self.storage {
            Storage::Host(v) => (v.as_mut_ptr(), v.len()),
            Storage::Device(m) => (m.addr().cast(), numel),
        }
    }

    /// The elements' bytes, in memory order (host tensors only).
    pub(crate) fn bytes(&self) -> Result<&[u8]> {
        match &self.storage {
            Storage::Host(v) => Ok(as_bytes(v)),
            Storage::Device(_) => Err(self.not_on_host("this call")),
        }
    }

    /// Where a posted receive's data lands (see `Request::wait`).
    pub(crate) fn landing(&mut self) -> crate::request::Landing<'_> {
        match &mut self.storage {
            Storage::Host(v) => crate::request::Landing::Host(as_bytes_mut(v)),
            Storage::Device(m) => crate::request::Landing::Device(&mut **m),
        }
    }

    /// The device memory of a device tensor, for copies into it after an op has completed.
    pub(crate) fn device_memory(&mut self) -> Option<*mut dyn DeviceMemory> {
        match &mut self.storage {
            Storage::Host(_) => None,
            Storage::Device(m) => Some(&mut **m as *mut dyn DeviceMemory),
        }
    }

    /// Overwrites every element with `from`'s bytes (exactly the tensor's size), wherever the
    /// tensor lives.
    pub(crate) fn write_bytes(&mut self, from: &[u8]) -> Result<()> {
        match &mut self.storage {
            Storage::Host(v) => {
                as_bytes_mut(v).copy_from_slice(from);
                Ok(())
            }
            Storage::Device(m) => m.write(from),
        }
    }
}

/// The bytes of `v`'s elements, in memory order.
fn as_bytes<T: Element>(v: &[T]) -> &[u8] {
    // SAFETY: `v` holds `v.len()` initialised elements; every element type is plain data
    // without padding (the sealed set of `Element`), so each byte is initialised.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The bytes of `v`'s elements, writable.
fn as_bytes_mut<T: Element>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; in addition every bit pattern is a valid value of every element
    // type (integers, IEEE floats), so any bytes written leave valid elements.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

impl<T: Element> From<Vec<T>> for Tensor<T> {
    /// A one-dimensional tensor.
    fn from(v: Vec<T>) -> Self {
        Tensor {
            shape: Shape::from_slice(&[v.len()]),
            storage: Storage::Host(HostMem::Vec(v)),
        }
    }
}

impl<T: Element> From<Tensor<T>> for Vec<T> {
    fn from(t: Tensor<T>) -> Self {
        t.into_vec()
    }
}

#[cfg(feature = "ndarray")]
mod nd {
    use super::*;
    use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};

    impl<T: Element, S: Data<Elem = T>, D: Dimension> From<&ArrayBase<S, D>> for Tensor<T> {
        /// Copies the array in logical (row-major) order, whatever its memory layout.
        fn from(a: &ArrayBase<S, D>) -> Self {
            Tensor {
                shape: Shape::from_slice(a.shape()),
                storage: Storage::Host(HostMem::Vec(a.iter().copied().collect())),
            }
        }
    }

    impl<T: Element> Tensor<T> {
        /// The tensor as an `ndarray` array of dynamic dimension.
        pub fn to_ndarray(&self) -> ArrayD<T> {
            ArrayD::from_shape_vec(IxDyn(&self.shape), self.to_vec())
                .expect("a tensor's element count always matches its shape")
        }
    }

    impl<T: Element> From<Tensor<T>> for ArrayD<T> {
        fn from(t: Tensor<T>) -> Self {
            let shape = t.shape.clone();
            ArrayD::from_shape_vec(IxDyn(&shape), t.into_vec())
                .expect("a tensor's element count always matches its shape")
        }
    }
}

impl<T: Element> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor<{}>{} on {} ",
            T::DTYPE,
            ShapeFmt(&self.shape),
            self.device()
        )?;
        fmt::Display::fmt(self, f)
    }
}

impl<T: Element> fmt::Display for Tensor<T> {
    /// Prints like NumPy's `repr` of the array: nested brackets, right-aligned columns, and
    /// integral floats as `3.`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let data = match self.try_to_vec() {
            Ok(d) => d,
            Err(e) => return write!(f, "<unreadable: {e}>"),
        };
        let cells = align_cells(data.iter().map(|&x| format_element(x)).collect());
        let width = cells.iter().map(|c| c.chars().count()).max().unwrap_or(0);
        write_nested(f, &self.shape, &cells, width, 0)
    }
}

fn format_element<T: Element>(x: T) -> String {
    if T::DTYPE.is_float() {
        let v = crate::element::to_f64(x);
        if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
            format!("{v:.0}.")
        } else {
            // The element's own shortest form (`0.1697` for an f32, not the f64 it widens to,
            // `0.16969999670982361`), as NumPy prints each dtype.
            format!("{x}")
        }
    } else {
        format!("{:?}", x)
    }
}

/// Aligns cells on their decimal point, as NumPy does: integer parts padded on the left,
/// fractional parts on the right.
fn align_cells(cells: Vec<String>) -> Vec<String> {
    let split = |c: &str| -> (usize, usize) {
        match c.find('.') {
            Some(p) => (p, c.len() - p),
            None => (c.len(), 0),
        }
    };
    let int_w = cells.iter().map(|c| split(c).0).max().unwrap_or(0);
    let frac_w = cells.iter().map(|c| split(c).1).max().unwrap_or(0);
    cells
        .into_iter()
        .map(|c| {
            let (i, fr) = split(&c);
            format!("{}{c}{}", " ".repeat(int_w - i), " ".repeat(frac_w - fr))
        })
        .collect()
}

fn write_nested(
    f: &mut fmt::Formatter<'_>,
    shape: &[usize],
    cells: &[String],
    width: usize,
    depth: usize,
) -> fmt::Result {
    let Some((&n, rest)) = shape.split_first() else {
        return write!(
            f,
            "{:>width$}",
            cells.first().map(String::as_str).unwrap_or("")
        );
    };
    let stride: usize = rest.iter().product();
    write!(f, "[")?;
    for i in 0..n {
        if i > 0 {
            if rest.is_empty() {
                write!(f, " ")?;
            } else {
                // NumPy separates sub-arrays with one newline per remaining dimension.
                for _ in 0..rest.len() {
                    writeln!(f)?;
                }
                write!(f, "{:indent$}", "", indent = depth + 1)?;
            }
        }
        write_nested(
            f,
            rest,
            &cells[i * stride..(i + 1) * stride],
            width,
            depth + 1,
        )?;
    }
    write!(f, "]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_check_sizes() {
        assert!(Tensor::from_vec([2, 3], vec![0f32; 5]).is_err());
        assert!(Tensor::<u8>::zeros([usize::MAX, 2]).is_err());
        // Counted in bytes, not elements: 2^61 f64s are 2^64 bytes.
        assert!(Tensor::<f64>::zeros([1 << 61]).is_err());
        assert!(Tensor::<f64>::full([0, 1 << 61], 1.0).unwrap().numel() == 0);
        // More than the machine has: an `Err` from the allocator, not an abort (Miri stops the
        // program on such a request instead of failing it).
        if !cfg!(miri) {
            let err = Tensor::<u8>::zeros([1 << 62]).unwrap_err();
            assert!(err.to_string().contains("cannot allocate"), "{err}");
        }
        let t = Tensor::from_fn([2, 3], |i| (i[0] * 10 + i[1]) as i32).unwrap();
        assert_eq!(t.as_slice().unwrap(), &[0, 1, 2, 10, 11, 12]);
        assert!(t.clone().reshape([4]).is_err());
        assert_eq!(t.reshape([3, 2]).unwrap().shape(), &[3, 2]);
    }

    /// Tensors rankwise allocates start on a cache line, whatever their type, shape and maker;
    /// one made from a `Vec` keeps that `Vec`'s buffer, and `into_vec` gives the elements back.
    #[test]
    fn allocated_tensors_start_on_a_line_and_vecs_are_kept() {
        let line = |p: *const u8| (p as usize).is_multiple_of(64);
        for shape in [vec![1], vec![3, 5], vec![17], vec![1000], vec![2, 3, 4]] {
            let full = Tensor::full(&shape, 2.5f32).unwrap();
            assert!(line(full.as_slice().unwrap().as_ptr().cast()), "{shape:?}");
            let ints = Tensor::<i64>::from_fn(&shape, |i| i.iter().sum::<usize>() as i64).unwrap();
            assert!(line(ints.as_slice().unwrap().as_ptr().cast()), "{shape:?}");
            let bytes = Tensor::<u8>::zeros(&shape).unwrap();
            assert!(line(bytes.as_slice().unwrap().as_ptr().cast()), "{shape:?}");
            let copy = ints.try_clone().unwrap();
            assert!(line(copy.as_slice().unwrap().as_ptr().cast()));
            assert_eq!(copy, ints);
            assert_eq!(full.into_vec(), vec![2.5f32; shape.iter().product()]);
        }
        let v: Vec<u32> = (0..100).collect();
        let at = v.as_ptr();
        let t = Tensor::from_vec([10, 10], v).unwrap();
        assert_eq!(
            t.as_slice().unwrap().as_ptr(),
            at,
            "the caller's Vec, not a copy"
        );
        let back = t.into_vec();
        assert_eq!(back.as_ptr(), at, "and handed back as it is");
        assert_eq!(back, (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn displays_like_numpy() {
        let t = Tensor::from_fn([5, 2], |i| (i[1] * 10 + 1) as f32 - 1.0).unwrap();
        let expect = "[[ 0. 10.]\n [ 0. 10.]\n [ 0. 10.]\n [ 0. 10.]\n [ 0. 10.]]";
        assert_eq!(t.to_string(), expect);
        let v = Tensor::from(vec![1.0f32, 2.0]);
        assert_eq!(v.to_string(), "[1. 2.]");
        let x = Tensor::from(vec![0.5f64, 2.0]);
        assert_eq!(x.to_string(), "[0.5 2. ]");
        // Each dtype's own shortest form, aligned on the point (torch and NumPy print
        // `[ 0.1697 -1.8013]` for these f32s; widening to f64 would print 0.16969999670982361).
        let w = Tensor::from(vec![0.1697f32, -1.8013]);
        assert_eq!(w.to_string(), "[ 0.1697 -1.8013]");
        let i = Tensor::from(vec![2i64, 13]);
        assert_eq!(i.to_string(), "[ 2 13]");
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn ndarray_round_trip_respects_layout() {
        let a = ndarray::arr2(&[[1i64, 2, 3], [4, 5, 6]]);
        let t = Tensor::from(&a.t());
        assert_eq!(t.shape(), &[3, 2]);
        assert_eq!(t.as_slice().unwrap(), &[1, 4, 2, 5, 3, 6]);
        let back: ndarray::ArrayD<i64> = t.into();
        assert_eq!(back, a.t().into_dyn());
    }
}
