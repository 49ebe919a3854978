//! `Ctx`: what a rank program calls. Every call is validated and described as an [`Op`] here,
//! then handed to the backend; the same builders serve single calls, groups and batches.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::copy::copy_bytes;
use crate::exec::{Backend, BatchMark, Buf, Op, PostedOp};
use crate::group::Group;
use crate::model::{CallSite, GroupId, OpDesc, OpKind, Shape};
use crate::request::{Request, SharedBackend, engine};
use crate::rules::{self, Aux};
use crate::tensor::{Device, DeviceMemory, Tensor};
use crate::trace::{Event, Recorder};
use crate::{DType, ReduceOp};
use rankwise_core::ops::{self as table, Spelling, stacked};
use std::panic::Location;

/// A rank's handle on its world: its rank, the world size, and every communication call.
///
/// Calls block until this rank's part is complete and return `Err` instead of hanging when the
/// program is wrong (see the crate docs). Roots and peers are global ranks, as in
/// `torch.distributed`. A context belongs to its rank's thread (it is not `Send`).
pub struct Ctx {
    rank: usize,
    world: usize,
    world_group: Group,
    /// Shared with the requests `isend`/`irecv` return, whose `wait` drives it.
    backend: SharedBackend,
    backend_name: &'static str,
    /// Where the tensors this context makes live (the backend's device).
    device: Device,
    /// How many groups with each member list this rank has created (see `Backend::create_group`).
    ordinals: HashMap<Vec<usize>, u32>,
    /// The record of every call, when tracing is on (see `trace`).
    trace: Option<Recorder>,
    /// The last batch's ops, as recorded (see [`Batch::repeat`]), and beside each the
    /// key of the call that made it, as words (`None` for calls that never repeat): the next
    /// batch compares each call it records with the key at the same place and keeps that op if
    /// the call repeats it. A program that runs the same bucket every step then neither
    /// describes nor validates its calls again, nor grows (and pages in) a fresh list. The
    /// ops' buffers dangle between batches; a repeat replaces them with its own tensors'
    /// pointers.
    spare_ops: Vec<Op>,
    spare_words: Vec<Option<CallWords>>,
    /// The number of the batch `spare_ops` come from, if it ran (see `BatchMark`).
    spare_serial: Option<u64>,
    /// How many batches this context has run: the next one's number.
    batches: u64,
    /// Per kind of call, the last lone broadcast, reduce, all_reduce, all_gather,
    /// reduce_scatter or all_to_all as validated: the next call of the kind that repeats it
    /// exactly reuses it (see [`Ctx::recall`]). Its buffers dangle between calls: a repeat
    /// replaces them with its own tensors' pointers (equal addresses, live provenance).
    last: [Option<Validated>; OpKind::ALL.len()],
}

/// What [`Ctx::recall`] found.
enum Recall {
    /// The call repeats the kept one: run that again.
    Repeat,
    /// It does not: describe and validate it, and keep it afterwards if `keep`.
    Miss { keep: bool },
}

/// Where a lone call was written: one address per place in the source.
type Loc = &'static Location<'static>;

/// A validated op, and what its validation read besides the op: the output's shape.
struct Validated {
    op: Op,
    output_shape: Shape,
    /// Where the lone call that made it was written: a repeat is recognised by this address
    /// before anything else (see [`Ctx::recall`]).
    loc: Loc,
    /// Calls from the same site that did not repeat it since it was kept (see [`Ctx::recall`]).
    misses: u32,
}

/// After how many calls from its site that do not repeat it a kept call gives way to the next
/// (see [`Ctx::recall`]).
const KEEP_AFTER_MISSES: u32 = 8;

/// A call as [`Ctx::recall`] compares it with the one before (and a batch, as [`CallWords`],
/// with the last batch's call at its place).
struct CallKey<'t> {
    kind: OpKind,
    group: GroupId,
    peer: Option<usize>,
    op: Option<ReduceOp>,
    dtype: DType,
    shape: &'t [usize],
    dim: usize,
    output_shape: &'t [usize],
    /// The buffers, as the call's tensors give them (the output's writable).
    input: (*mut u8, usize),
    output: (*mut u8, usize),
    /// Where a batched call was written: its `Location`, compared by address (one place in
    /// the source has one; a copy of it elsewhere only makes the call look new). `None` for a
    /// lone call, which [`Ctx::recall`] matches by its `Location` first.
    site: Option<Loc>,
}

/// A call's key ([`CallKey`]) in ten words, kept by a batch beside each op for the next
/// batch's call at that place (see [`Batch::repeat`]): equal words, equal keys, so one
/// comparison of two small arrays decides a repeat. `None` when a part does not fit its field
/// (see [`dims_word`]; a `dim` from 2^16, a root from 2^31): such calls are described anew.
type CallWords = [u64; 10];

#[inline(always)] // so that a call's key never needs to be in memory
fn call_words(k: &CallKey<'_>) -> Option<CallWords> {
    let mut words = [0; 10];
    each_word(k, |i, w| {
        words[i] = w;
        true
    })
    .then_some(words)
}

/// Whether `k`'s words are `words`, computed one at a time and compared as they come (a whole
/// array built and then compared would be written to memory and read back at once, which
/// stalls).
#[inline(always)]
fn words_match(words: &CallWords, k: &CallKey<'_>) -> bool {
    each_word(k, |i, w| words[i] == w)
}

/// Calls `f` with each word of `k`'s [`CallWords`] in order, while it returns `true`; whether
/// every word was made and accepted (`false` as soon as a part does not fit).
#[inline(always)]
fn each_word(k: &CallKey<'_>, mut f: impl FnMut(usize, u64) -> bool) -> bool {
    let word = |n: usize| n as u64;
    // A batch's keys always have their site (only lone calls leave it to their `Location`).
    let Some(site) = k.site else {
        return false;
    };
    let Some(dim) = u64::try_from(k.dim).ok().filter(|&d| d < 1 << 16) else {
        return false;
    };
    let peer = match k.peer {
        None => 0,
        Some(p) if p < 1 << 31 => word(p) + 1,
        Some(_) => return false,
    };
    let (op, scale) = match k.op {
        None => (0, 0),
        Some(ReduceOp::PreMulSum(s)) => (1, s.to_bits()),
        Some(ReduceOp::Sum) => (2, 0),
        Some(ReduceOp::Prod) => (3, 0),
        Some(ReduceOp::Min) => (4, 0),
        Some(ReduceOp::Max) => (5, 0),
        Some(ReduceOp::Avg) => (6, 0),
        Some(ReduceOp::BitAnd) => (7, 0),
        Some(ReduceOp::BitOr) => (8, 0),
        Some(ReduceOp::BitXor) => (9, 0),
    };
    f(
        0,
        k.kind as u64 | (k.dtype as u64) << 8 | dim << 16 | peer << 32,
    ) && f(1, u64::from(k.group.0) | op << 32)
        && f(2, scale)
        && f(3, word(k.input.0.addr()))
        && f(4, word(k.input.1))
        && f(5, word(k.output.0.addr()))
        && f(6, word(k.output.1))
        && dims_word(k.shape).is_some_and(|w| f(7, w))
        && dims_word(k.output_shape).is_some_and(|w| f(8, w))
        && f(9, word(std::ptr::from_ref(site).addr()))
}

/// A shape as one word, injectively: its length in the top three bits, then its dimensions —
/// 30 bits each for up to two, 14 bits each for three or four. `None` for longer shapes or
/// larger dimensions.
#[inline(always)]
fn dims_word(shape: &[usize]) -> Option<u64> {
    let bits = match shape.len() {
        0..=2 => 30,
        3 | 4 => 14,
        _ => return None,
    };
    let mut word = 0u64;
    for &d in shape {
        let d = u64::try_from(d).ok().filter(|&d| d < 1 << bits)?;
        word = word << bits | d;
    }
    Some((shape.len() as u64) << 61 | word)
}

/// What a batch found for a call it records (see [`Batch::check_repeat`]).
enum Seen {
    /// It repeats the last batch's call at its place: its buffers, input and output.
    Repeat(*mut u8, *mut u8),
    /// It does not: its key as words, to keep with its op.
    New(Option<CallWords>),
}

/// Builds validated [`Op`]s for one call site on one group.
struct Caller<'g> {
    rank: usize,
    world: usize,
    group: &'g Group,
    site: CallSite,
    batched: bool,
    /// The backend's device: tensors live there or on the host.
    device: Device,
}

/// A validated op and, for a list form, the staging it goes through.
struct Built {
    op: Op,
    staged: Option<Staged>,
}

/// Whether two shapes are equal, dimension by dimension: a slice comparison calls `memcmp`,
/// which costs more than comparing the few dimensions of a shape.
fn same_dims(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(true, |same, (x, y)| same & (x == y))
}

/// What a call's builder made, read where it lies: the op, and the staging of a list form.
trait Parts {
    fn parts(&mut self) -> (&mut Op, Option<Staged>);
    fn into_op(self) -> Op;
}

impl Parts for Op {
    fn parts(&mut self) -> (&mut Op, Option<Staged>) {
        (self, None)
    }
    fn into_op(self) -> Op {
        self
    }
}

impl Parts for Built {
    fn parts(&mut self) -> (&mut Op, Option<Staged>) {
        (&mut self.op, self.staged.take())
    }
    fn into_op(self) -> Op {
        self.op
    }
}

/// The contiguous buffer a list form's op reads or writes in place of its list (backends move
/// one buffer per op), and the copies into the list's tensors once the op has completed. Inputs
/// are copied in when the call is made: their tensors stay borrowed, so they cannot change
/// before the op runs. The buffer is host memory; tensors of the list on a device are copied
/// to and from it through their device.
struct Staged {
    /// Owns the contiguous buffer (a `Vec<T>`); its heap storage does not move with the box.
    _keep: Box<dyn std::any::Any + Send>,
    /// `(from, to, bytes)`: from the buffer into an output tensor of the list.
    after: Vec<(*const u8, To, usize)>,
}

/// Where a list's output tensor keeps its elements.
enum To {
    Host(*mut u8),
    Device(*mut dyn DeviceMemory),
}

// SAFETY: the pointers are addresses in `_keep` (owned here) and in tensors borrowed mutably by
// the call or the batch that holds this `Staged`; they are only used by `finish`, called by the
// holder while those borrows are live.
unsafe impl Send for Staged {}

impl Staged {
    /// A contiguous copy of `list`, read by the op.
    fn input<T: Element>(list: &[Tensor<T>]) -> Result<(Buf, Staged)> {
        let mut data: Vec<T> = Vec::with_capacity(list.iter().map(Tensor::numel).sum());
        for t in list {
            match t.as_slice() {
                Ok(host) => data.extend_from_slice(host),
                Err(_) => data.extend(t.try_to_vec()?),
            }
        }
        let buf = Buf::host(data.as_mut_ptr().cast(), data.len());
        let staged = Staged {
            _keep: Box::new(data),
            after: Vec::new(),
        };
        Ok((buf, staged))
    }

    /// A contiguous buffer the op writes, copied into `list`'s tensors by [`Staged::finish`].
    fn output<T: Element>(list: &mut [Tensor<T>]) -> (Buf, Staged) {
        let mut data: Vec<T> = vec![T::default(); list.iter().map(Tensor::numel).sum()];
        let size = std::mem::size_of::<T>();
        // One pointer for the op and for the copies after it: the op writes through it, and a
        // pointer taken from a reference to `data` would not be valid for reading after that.
        let base = data.as_mut_ptr().cast::<u8>();
        let mut after = Vec::with_capacity(list.len());
        let mut at = 0;
        for t in list.iter_mut() {
            let len = t.numel();
            let to = match t.device_memory() {
                Some(m) => To::Device(m),
                None => To::Host(t.raw_mut().0.cast::<u8>()),
            };
            // `at` bytes stay within `data`, which holds every tensor's elements in turn.
            after.push((base.wrapping_add(at).cast_const(), to, len * size));
            at += len * size;
        }
        let buf = Buf::host(base, data.len());
        let staged = Staged {
            _keep: Box::new(data),
            after,
        };
        (buf, staged)
    }

    /// Copies the op's result into the list; call only after the op has completed.
    fn finish(self) -> Result<()> {
        for (from, to, bytes) in &self.after {
            // SAFETY: `from` is within `_keep`, alive until the end of this function, with
            // `bytes` bytes after it; `to` belongs to a tensor of the list, still mutably
            // borrowed by the holder (see `Send`), with room for `bytes`; the two are different
            // allocations.
            unsafe {
                match *to {
                    To::Host(to) => copy_bytes(to, *from, *bytes),
                    To::Device(m) => {
                        (*m).write(std::slice::from_raw_parts(*from, *bytes))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The output of `reduce_scatter_list` (one tensor) or `all_to_all_list` (a list).
enum ListOrOne<'t, T: Element> {
    One(&'t mut Tensor<T>),
    List(&'t mut [Tensor<T>]),
}

impl Caller<'_> {
    /// The buffer an op reads from `t`: host memory, or the backend's own device's.
    fn buf_in<T: Element>(&self, t: &Tensor<T>) -> Result<Buf> {
        let (ptr, len) = t.raw();
        Ok(Buf {
            ptr: ptr.cast_mut().cast(),
            len,
            on_device: self.on_device(t.device())?,
        })
    }

    /// The buffer an op writes into `t`.
    fn buf_out<T: Element>(&self, t: &mut Tensor<T>) -> Result<Buf> {
        let on_device = self.on_device(t.device())?;
        let (ptr, len) = t.raw_mut();
        Ok(Buf {
            ptr: ptr.cast(),
            len,
            on_device,
        })
    }

    /// Whether a tensor on `d` is on the backend's device (rather than the host); an `Err` for
    /// any other device, which the backend could not address.
    #[inline]
    fn on_device(&self, d: Device) -> Result<bool> {
        if d == Device::Host {
            return Ok(false);
        }
        if d == self.device {
            return Ok(true);
        }
        Err(Error::Tensor(format!(
            "{}: rank {} passed a tensor on {d}, but this rank's tensors live on {}: copy it \
             with `to_host()` (or `ctx.to_device(&t)`) first",
            self.site, self.rank, self.device
        )))
    }

    fn desc<T: Element>(
        &self,
        kind: OpKind,
        peer: Option<usize>,
        op: Option<ReduceOp>,
        shape: &[usize],
        dim: usize,
    ) -> OpDesc {
        let group = if kind.is_p2p() {
            GroupId::WORLD
        } else {
            self.group.id()
        };
        OpDesc {
            kind,
            group,
            peer,
            op,
            dtype: T::DTYPE,
            shape: Shape::from_slice(shape),
            dim,
            site: self.site,
        }
    }

    #[inline]
    fn finish(&self, desc: OpDesc, input: Buf, output: Buf, aux: Aux<'_>) -> Result<Op> {
        let members = if desc.kind.is_p2p() {
            &[][..]
        } else {
            self.group.members()
        };
        rules::validate(&desc, self.rank, self.world, members, self.batched, aux).map_err(
            |violation| Error::Misuse {
                site: desc.site,
                rank: self.rank,
                violation,
            },
        )?;
        // A checked program's call names the peer or root the macro verified it with.
        crate::guard::Guard::check_peer(desc.peer, &desc.site)?;
        Ok(Op {
            desc,
            input,
            output,
        })
    }

    fn send<T: Element>(&self, t: &Tensor<T>, dst: usize) -> Result<Op> {
        let d = self.desc::<T>(OpKind::Send, Some(dst), None, t.shape(), 0);
        self.finish(d, self.buf_in(t)?, Buf::NONE, Aux::default())
    }

    fn recv<T: Element>(&self, t: &mut Tensor<T>, src: usize) -> Result<Op> {
        let d = self.desc::<T>(OpKind::Recv, Some(src), None, t.shape(), 0);
        self.finish(d, Buf::NONE, self.buf_out(t)?, Aux::default())
    }

    fn in_place<T: Element>(
        &self,
        kind: OpKind,
        t: &mut Tensor<T>,
        root: Option<usize>,
        op: Option<ReduceOp>,
    ) -> Result<Op> {
        let d = self.desc::<T>(kind, root, op, t.shape(), 0);
        let buf = self.buf_out(t)?;
        self.finish(d, buf, buf, Aux::default())
    }

    fn gather<T: Element>(
        &self,
        x: &Tensor<T>,
        out: Option<&mut Tensor<T>>,
        root: usize,
        dim: usize,
    ) -> Result<Op> {
        let d = self.desc::<T>(OpKind::Gather, Some(root), None, x.shape(), dim);
        let out_shape: Option<Shape> = out.as_ref().map(|o| Shape::from_slice(o.shape()));
        let output = match out {
            Some(out) => self.buf_out(out)?,
            None => Buf::NONE,
        };
        let aux = Aux {
            output: out_shape.as_deref(),
            root_input: None,
        };
        self.finish(d, self.buf_in(x)?, output, aux)
    }

    fn scatter<T: Element>(
        &self,
        x: Option<&Tensor<T>>,
        out: &mut Tensor<T>,
        root: usize,
        dim: usize,
    ) -> Result<Op> {
        let d = self.desc::<T>(OpKind::Scatter, Some(root), None, out.shape(), dim);
        let aux = Aux {
            output: None,
            root_input: x.map(|x| x.shape()),
        };
        let input = match x {
            Some(x) => self.buf_in(x)?,
            None => Buf::NONE,
        };
        self.finish(d, input, self.buf_out(out)?, aux)
    }

    /// `all_gather`, `reduce_scatter`, `all_to_all`: one input, one output, same on every member.
    fn in_out<T: Element>(
        &self,
        kind: OpKind,
        x: &Tensor<T>,
        out: &mut Tensor<T>,
        op: Option<ReduceOp>,
        dim: usize,
    ) -> Result<Op> {
        let d = self.desc::<T>(kind, None, op, x.shape(), dim);
        let out_shape = Shape::from_slice(out.shape());
        let aux = Aux {
            output: Some(&out_shape),
            root_input: None,
        };
        self.finish(d, self.buf_in(x)?, self.buf_out(out)?, aux)
    }

    /// Checks a list argument against the rule of list forms. A non-member skips it: its call
    /// fails on membership instead, as every collective's does.
    fn check_list<T: Element>(
        &self,
        form: &Spelling,
        param: &str,
        list: &[Tensor<T>],
        element: &[usize],
    ) -> Result<()> {
        let members = self.group.members();
        if members.binary_search(&self.rank).is_err() {
            return Ok(());
        }
        let shapes: Vec<&[usize]> = list.iter().map(Tensor::shape).collect();
        rules::list(form, param, &shapes, element, members.len()).map_err(|violation| {
            Error::Misuse {
                site: self.site,
                rank: self.rank,
                violation,
            }
        })
    }

    /// `all_gather_list`, `gather_list`: one input, a list of outputs (`None` off the root).
    fn with_output_list<T: Element>(
        &self,
        form: Spelling,
        x: &Tensor<T>,
        outs: Option<&mut [Tensor<T>]>,
        root: Option<usize>,
    ) -> Result<Built> {
        let element = x.shape();
        let (output, out_shape, staged) = match outs {
            Some(outs) => {
                self.check_list(&form, "outputs", outs, element)?;
                let shape = stacked(outs.len(), element);
                let (buf, staged) = Staged::output(outs);
                (buf, Some(shape), Some(staged))
            }
            None => (Buf::NONE, None, None),
        };
        let d = self.desc::<T>(form.kind, root, None, &stacked(1, element), 0);
        let aux = Aux {
            output: out_shape.as_deref(),
            root_input: None,
        };
        let op = self.finish(d, self.buf_in(x)?, output, aux)?;
        Ok(Built { op, staged })
    }

    /// `scatter_list`: the root's list of inputs (`None` elsewhere), one output.
    fn scatter_list<T: Element>(
        &self,
        inputs: Option<&[Tensor<T>]>,
        out: &mut Tensor<T>,
        root: usize,
    ) -> Result<Built> {
        let form = table::SCATTER_LIST;
        let element = Shape::from_slice(out.shape());
        let (input, in_shape, staged) = match inputs {
            Some(inputs) => {
                self.check_list(&form, "inputs", inputs, &element)?;
                let (buf, staged) = Staged::input(inputs)?;
                (buf, Some(stacked(inputs.len(), &element)), Some(staged))
            }
            None => (Buf::NONE, None, None),
        };
        let d = self.desc::<T>(form.kind, Some(root), None, &stacked(1, &element), 0);
        let aux = Aux {
            output: None,
            root_input: in_shape.as_deref(),
        };
        let op = self.finish(d, input, self.buf_out(out)?, aux)?;
        Ok(Built { op, staged })
    }

    /// `reduce_scatter_list`, `all_to_all_list`: a list of inputs; one output, or a list.
    fn with_input_list<T: Element>(
        &self,
        form: Spelling,
        inputs: &[Tensor<T>],
        out: ListOrOne<'_, T>,
        op: Option<ReduceOp>,
    ) -> Result<Built> {
        let element = Shape::from_slice(match &out {
            ListOrOne::One(t) => t.shape(),
            ListOrOne::List(_) => inputs.first().map_or(&[][..], |t| t.shape()),
        });
        self.check_list(&form, "inputs", inputs, &element)?;
        let (input, mut staged) = Staged::input(inputs)?;
        let (output, out_shape) = match out {
            ListOrOne::One(t) => (self.buf_out(t)?, stacked(1, &element)),
            ListOrOne::List(outs) => {
                self.check_list(&form, "outputs", outs, &element)?;
                let shape = stacked(outs.len(), &element);
                let (buf, out_staged) = Staged::output(outs);
                // One `Staged` keeps both buffers: the input's copy has nothing to do after.
                staged = Staged {
                    _keep: Box::new((staged._keep, out_staged._keep)),
                    after: out_staged.after,
                };
                (buf, shape)
            }
        };
        let d = self.desc::<T>(form.kind, None, op, &stacked(inputs.len(), &element), 0);
        let aux = Aux {
            output: Some(&out_shape),
            root_input: None,
        };
        let op = self.finish(d, input, output, aux)?;
        Ok(Built {
            op,
            staged: Some(staged),
        })
    }

    fn barrier(&self) -> Result<Op> {
        let d = self.desc::<u8>(OpKind::Barrier, None, None, &[], 0);
        self.finish(d, Buf::NONE, Buf::NONE, Aux::default())
    }
}

/// The lone forms of the in-place and input/output collectives for [`Ctx`] and [`Comm`]: run
/// at once, a repeat of the last call of its kind reusing that call's validated op
/// ([`Ctx::recall`]).
macro_rules! lone_sinks {
    () => {
        fn sink_in_place<T: Element>(
            &mut self,
            site: Loc,
            kind: OpKind,
            t: &mut Tensor<T>,
            root: Option<usize>,
            op: Option<ReduceOp>,
        ) -> Result<()> {
            let (ctx, group) = self.target();
            ctx.in_place_one(group, site, kind, t, root, op)
        }

        fn sink_in_out<T: Element>(
            &mut self,
            site: Loc,
            kind: OpKind,
            x: &Tensor<T>,
            out: &mut Tensor<T>,
            op: Option<ReduceOp>,
            dim: usize,
        ) -> Result<()> {
            let (ctx, group) = self.target();
            ctx.in_out_one(group, site, kind, x, out, op, dim)
        }
    };
}

/// The same forms for [`Batch`] and [`BatchComm`]: recorded, a call that repeats the last
/// batch's op at the same place keeping that op ([`Batch::repeat`]).
macro_rules! recorded_sinks {
    ($a:lifetime) => {
        fn sink_in_place<T: Element>(
            &mut self,
            loc: Loc,
            kind: OpKind,
            t: &$a mut Tensor<T>,
            root: Option<usize>,
            op: Option<ReduceOp>,
        ) -> &mut Self {
            let (batch, group) = self.recorder();
            let id = group.unwrap_or(&batch.ctx.world_group).id();
            let seen = match in_place_key(id, Some(loc), kind, t, root, op) {
                Some(ref key) => batch.check_repeat(key),
                None => Seen::New(None),
            };
            // The closure that describes a new call is made on that branch alone.
            match seen {
                Seen::Repeat(input, output) => batch.repeat(group, loc, (input, output)),
                Seen::New(words) => {
                    let build = move |c: &Caller<'_>| c.in_place(kind, t, root, op);
                    batch.record(group, CallSite::from(loc), words, build)
                }
            };
            self
        }

        fn sink_in_out<T: Element>(
            &mut self,
            loc: Loc,
            kind: OpKind,
            x: &$a Tensor<T>,
            out: &$a mut Tensor<T>,
            op: Option<ReduceOp>,
            dim: usize,
        ) -> &mut Self {
            let (batch, group) = self.recorder();
            let id = group.unwrap_or(&batch.ctx.world_group).id();
            let seen = match in_out_key(id, Some(loc), kind, x, &mut *out, op, dim) {
                Some(ref key) => batch.check_repeat(key),
                None => Seen::New(None),
            };
            match seen {
                Seen::Repeat(input, output) => batch.repeat(group, loc, (input, output)),
                Seen::New(words) => {
                    let build = move |c: &Caller<'_>| c.in_out(kind, x, out, op, dim);
                    batch.record(group, CallSite::from(loc), words, build)
                }
            };
            self
        }
    };
}

/// The communication methods, written once for [`Ctx`], [`Comm`], [`Batch`] and [`BatchComm`].
/// `$a` is how long tensors stay borrowed; `$ret` what a call returns. Each type provides
/// `sink(site, build)`, which runs or records the op that `build` makes.
macro_rules! comm_methods {
    ($a:lifetime, $ret:ty) => {
        /// Sends `tensor` to global rank `dst`. Blocking sends complete when `dst` has received
        /// the data (rendezvous: a send never completes on buffering alone).
        #[track_caller]
        pub fn send<T: Element>(&mut self, tensor: &$a Tensor<T>, dst: usize) -> $ret {
            self.sink(CallSite::caller(), move |c| c.send(tensor, dst))
        }

        /// Receives into `tensor` from global rank `src`; the matching send must have the same
        /// dtype and element count.
        #[track_caller]
        pub fn recv<T: Element>(&mut self, tensor: &$a mut Tensor<T>, src: usize) -> $ret {
            self.sink(CallSite::caller(), move |c| c.recv(tensor, src))
        }

        /// Copies `root`'s `tensor` into every member's `tensor` (same shape everywhere).
        #[track_caller]
        pub fn broadcast<T: Element>(&mut self, tensor: &$a mut Tensor<T>, root: usize) -> $ret {
            self.sink_in_place(Location::caller(), OpKind::Broadcast, tensor, Some(root), None)
        }

        /// Reduces every member's `tensor` with `op` into `root`'s `tensor`; the other members'
        /// tensors are left unchanged.
        #[track_caller]
        pub fn reduce<T: Element>(&mut self, tensor: &$a mut Tensor<T>, root: usize, op: ReduceOp) -> $ret {
            self.sink_in_place(Location::caller(), OpKind::Reduce, tensor, Some(root), Some(op))
        }

        /// Reduces every member's `tensor` with `op` and leaves the result in all of them.
        #[track_caller]
        pub fn all_reduce<T: Element>(&mut self, tensor: &$a mut Tensor<T>, op: ReduceOp) -> $ret {
            self.sink_in_place(Location::caller(), OpKind::AllReduce, tensor, None, Some(op))
        }

        /// Concatenates every member's `input` along `dim`, in group-rank order, into `output`
        /// on `root`. `output` is `Some` on the root (shape: `input`'s with `dim` times the
        /// group size) and `None` elsewhere.
        #[track_caller]
        pub fn gather<T: Element>(
            &mut self,
            input: &$a Tensor<T>,
            output: Option<&$a mut Tensor<T>>,
            root: usize,
            dim: usize,
        ) -> $ret {
            self.sink(CallSite::caller(), move |c| c.gather(input, output, root, dim))
        }

        /// Concatenates every member's `input` along `dim`, in group-rank order, into every
        /// member's `output` (rows for `dim = 0`, columns for `dim = 1`, …).
        #[track_caller]
        pub fn all_gather<T: Element>(&mut self, input: &$a Tensor<T>, output: &$a mut Tensor<T>, dim: usize) -> $ret {
            self.sink_in_out(Location::caller(), OpKind::AllGather, input, output, None, dim)
        }

        /// Splits `root`'s `input` along `dim` into one equal part per member; member `i` gets
        /// part `i` in `output`. `input` is `Some` on the root and `None` elsewhere.
        #[track_caller]
        pub fn scatter<T: Element>(
            &mut self,
            input: Option<&$a Tensor<T>>,
            output: &$a mut Tensor<T>,
            root: usize,
            dim: usize,
        ) -> $ret {
            self.sink(CallSite::caller(), move |c| c.scatter(input, output, root, dim))
        }

        /// Reduces every member's `input` with `op`, splits the result along `dim` into one
        /// equal part per member, and leaves part `i` in member `i`'s `output`.
        #[track_caller]
        pub fn reduce_scatter<T: Element>(
            &mut self,
            input: &$a Tensor<T>,
            output: &$a mut Tensor<T>,
            op: ReduceOp,
            dim: usize,
        ) -> $ret {
            self.sink_in_out(Location::caller(), OpKind::ReduceScatter, input, output, Some(op), dim)
        }

        /// Splits every member's `input` along `dim` into one part per member; part `j` of
        /// member `i` becomes part `i` of member `j`'s `output` (same shape as `input`).
        #[track_caller]
        pub fn all_to_all<T: Element>(&mut self, input: &$a Tensor<T>, output: &$a mut Tensor<T>, dim: usize) -> $ret {
            self.sink_in_out(Location::caller(), OpKind::AllToAll, input, output, None, dim)
        }

        /// `all_gather` into a list, as torch writes it: member `i`'s `input` lands in
        /// `outputs[i]` of every member. `outputs` holds one tensor of `input`'s shape per member.
        /// Lists go through one contiguous buffer (one extra copy); the tensor form with a `dim`
        /// is zero-copy.
        #[track_caller]
        pub fn all_gather_list<T: Element>(&mut self, input: &$a Tensor<T>, outputs: &$a mut [Tensor<T>]) -> $ret {
            self.sink(CallSite::caller(), move |c| c.with_output_list(table::ALL_GATHER_LIST, input, Some(outputs), None))
        }

        /// `gather` into a list: member `i`'s `input` lands in `outputs[i]` on `root`.
        /// `outputs` is `Some` (one tensor of `input`'s shape per member) on the root and `None`
        /// elsewhere.
        /// Lists go through one contiguous buffer (one extra copy); the tensor form with a `dim`
        /// is zero-copy.
        #[track_caller]
        pub fn gather_list<T: Element>(
            &mut self,
            input: &$a Tensor<T>,
            outputs: Option<&$a mut [Tensor<T>]>,
            root: usize,
        ) -> $ret {
            self.sink(CallSite::caller(), move |c| c.with_output_list(table::GATHER_LIST, input, outputs, Some(root)))
        }

        /// `scatter` from a list: `inputs[i]` on `root` lands in member `i`'s `output`.
        /// `inputs` is `Some` (one tensor of `output`'s shape per member) on the root and
        /// `None` elsewhere.
        /// Lists go through one contiguous buffer (one extra copy); the tensor form with a `dim`
        /// is zero-copy.
        #[track_caller]
        pub fn scatter_list<T: Element>(
            &mut self,
            inputs: Option<&$a [Tensor<T>]>,
            output: &$a mut Tensor<T>,
            root: usize,
        ) -> $ret {
            self.sink(CallSite::caller(), move |c| c.scatter_list(inputs, output, root))
        }

        /// `reduce_scatter` from a list: `inputs[i]` of every member, reduced with `op`, lands
        /// in member `i`'s `output`. `inputs` holds one tensor of `output`'s shape per member.
        /// Lists go through one contiguous buffer (one extra copy); the tensor form with a `dim`
        /// is zero-copy.
        #[track_caller]
        pub fn reduce_scatter_list<T: Element>(
            &mut self,
            inputs: &$a [Tensor<T>],
            output: &$a mut Tensor<T>,
            op: ReduceOp,
        ) -> $ret {
            self.sink(CallSite::caller(), move |c| c.with_input_list(table::REDUCE_SCATTER_LIST, inputs, ListOrOne::One(output), Some(op)))
        }

        /// `all_to_all` with lists: `inputs[j]` of member `i` lands in `outputs[i]` of member
        /// `j`. Both lists hold one tensor per member, all of one shape.
        /// Lists go through one contiguous buffer (one extra copy); the tensor form with a `dim`
        /// is zero-copy.
        #[track_caller]
        pub fn all_to_all_list<T: Element>(&mut self, inputs: &$a [Tensor<T>], outputs: &$a mut [Tensor<T>]) -> $ret {
            self.sink(CallSite::caller(), move |c| c.with_input_list(table::ALL_TO_ALL_LIST, inputs, ListOrOne::List(outputs), None))
        }

        /// Waits until every member has reached this barrier.
        #[track_caller]
        pub fn barrier(&mut self) -> $ret {
            self.sink(CallSite::caller(), move |c| c.barrier())
        }
    };
}

impl Ctx {
    /// A context for `rank` of `world` ranks on `backend`.
    pub(crate) fn new(rank: usize, world: usize, backend: Box<dyn Backend>) -> Self {
        let world_group = Group::new(
            GroupId::WORLD,
            (0..world).collect::<Vec<_>>().into(),
            backend.world_id(),
        );
        Ctx {
            rank,
            world,
            world_group,
            backend_name: backend.name(),
            device: backend.device(),
            backend: Rc::new(RefCell::new(backend)),
            ordinals: HashMap::new(),
            trace: None,
            spare_ops: Vec::new(),
            spare_words: Vec::new(),
            spare_serial: None,
            batches: 0,
            last: Default::default(),
        }
    }

    /// Starts recording every call, with times counted from `epoch`.
    pub(crate) fn start_trace(&mut self, epoch: std::time::Instant) {
        self.trace = Some(Recorder::new(epoch));
    }

    /// The calls recorded so far, if tracing is on.
    pub(crate) fn take_trace(&mut self) -> Option<Vec<Event>> {
        self.trace.take().map(|t| t.events)
    }

    /// This rank (0-based).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the world.
    pub fn world(&self) -> usize {
        self.world
    }

    /// The group of all ranks.
    pub fn world_group(&self) -> &Group {
        &self.world_group
    }

    /// Whether the backend uses the proof of a `#[rankwise::program]` function (see
    /// `guard`): then the guard's entry makes the handshake.
    pub(crate) fn trusts_proofs(&self) -> bool {
        self.backend.try_borrow().is_ok_and(|b| b.trusts_proofs())
    }

    /// The guard's handshake: every rank's `mine`, gathered by one all_gather at `site` (the
    /// program function's entry), which the usual agreement check compares with whatever call
    /// each other rank makes there.
    pub(crate) fn handshake(&mut self, site: CallSite, mine: u64) -> Result<Vec<u64>> {
        let x = Tensor::from_vec([1], vec![mine])?;
        let mut all = Tensor::<u64>::zeros([self.world])?;
        // Described every time: the site is the program's entry, not a `Location` to recall by.
        self.run_one(None, site, None, |c| {
            c.in_out(OpKind::AllGather, &x, &mut all, None, 0)
        })?;
        Ok(all.to_vec())
    }

    /// The backend's name (`"local"`, `"mpi"`, `"nccl"`, `"nccl-host"`).
    pub fn backend_name(&self) -> &'static str {
        self.backend_name
    }

    /// Whether this backend can reduce `dtype` with `op`: [`ReduceOp::supports`] narrowed to
    /// what the backend has (NCCL has no bitwise reductions). Programs meant to run on every
    /// backend can ask before choosing an op; an unsupported one is an `Err` before any call.
    pub fn supports(&self, op: ReduceOp, dtype: DType) -> bool {
        op.supports(dtype) && self.backend.try_borrow().is_ok_and(|b| b.supports(op))
    }

    /// Where the tensors this context makes live: the host, or under NCCL the rank's GPU
    /// (`cuda:r`).
    pub fn device(&self) -> Device {
        self.device
    }

    /// A tensor of `shape` filled with `value`, on this rank's device.
    pub fn full<T: Element>(&self, shape: impl AsRef<[usize]>, value: T) -> Result<Tensor<T>> {
        self.to_device_owned(Tensor::full(shape, value)?)
    }

    /// A tensor of `shape` filled with zeros, on this rank's device.
    pub fn zeros<T: Element>(&self, shape: impl AsRef<[usize]>) -> Result<Tensor<T>> {
        self.to_device_owned(Tensor::zeros(shape)?)
    }

    /// A tensor of zeros with `like`'s shape and element type, on this rank's device
    /// (`torch.zeros_like`): the natural way to size a receive buffer from what is sent.
    pub fn zeros_like<T: Element>(&self, like: &Tensor<T>) -> Result<Tensor<T>> {
        self.zeros(like.shape())
    }

    /// A tensor of `shape` holding `data` (row-major), on this rank's device.
    pub fn tensor<T: Element>(
        &self,
        shape: impl AsRef<[usize]>,
        data: Vec<T>,
    ) -> Result<Tensor<T>> {
        self.to_device_owned(Tensor::from_vec(shape, data)?)
    }

    /// A copy of `t` on this rank's device (`t.cuda()` under NCCL; a plain copy where tensors
    /// live on the host).
    pub fn to_device<T: Element>(&self, t: &Tensor<T>) -> Result<Tensor<T>> {
        if t.device() == self.device {
            return t.try_clone();
        }
        self.to_device_owned(t.to_host()?)
    }

    /// `host` moved to this rank's device (returned as it is where tensors live on the host).
    fn to_device_owned<T: Element>(&self, host: Tensor<T>) -> Result<Tensor<T>> {
        if self.device == Device::Host {
            return Ok(host);
        }
        let bytes = host.numel() * std::mem::size_of::<T>();
        let mem = match engine(&self.backend)?.alloc_device(bytes) {
            Some(mem) => mem?,
            None => return Ok(host),
        };
        Tensor::on_device(host, mem)
    }

    /// Creates a communicator of the given global ranks (any order; duplicates are an error).
    ///
    /// Unlike torch, creating a group does not communicate: members that create groups with
    /// the same members in the same order get the same communicator. Non-members may create
    /// the handle too, but not use it.
    #[track_caller]
    pub fn new_group(&mut self, members: impl AsRef<[usize]>) -> Result<Group> {
        let site = CallSite::caller();
        let sorted =
            rules::group(members.as_ref(), self.world).map_err(|v| self.misuse(site, v))?;
        let ordinal = self.ordinals.entry(sorted.clone()).or_insert(0);
        let id = engine(&self.backend)?.create_group(&sorted, *ordinal)?;
        *ordinal += 1;
        Ok(Group::new(
            id,
            Arc::from(sorted),
            self.world_group.world_id(),
        ))
    }

    /// Splits the world into disjoint groups (every rank in exactly one part, like
    /// `MPI_Comm_split` with static colors) and returns the part holding this rank.
    #[track_caller]
    pub fn split(&mut self, parts: &[&[usize]]) -> Result<Group> {
        let site = CallSite::caller();
        rules::split(parts, self.world).map_err(|v| self.misuse(site, v))?;
        let mut mine = None;
        for part in parts {
            let g = self.new_group(part)?;
            if g.contains(self.rank) {
                mine = Some(g);
            }
        }
        // `rules::split` proved that some part holds every rank, this one included.
        mine.ok_or_else(|| {
            Error::Internal(format!(
                "a valid split has no part holding rank {}",
                self.rank
            ))
        })
    }

    /// Posts a send of `tensor` to rank `dst` and returns at once (`torch.distributed.isend`):
    /// the data is copied now, so the request only keeps `tensor` borrowed (unchangeable) until
    /// [`Request::wait`]. The message is matched in order with this rank's other sends to
    /// `dst`, and a rank may post a send to itself for a later receive to match.
    #[track_caller]
    pub fn isend<'t, T: Element>(
        &mut self,
        tensor: &'t Tensor<T>,
        dst: usize,
    ) -> Result<Request<'t>> {
        let site = CallSite::caller();
        let op = self
            .posting(site)
            .and_then(|c| c.send(tensor, dst))
            .map_err(|e| self.refused(e))?;
        let data = match tensor.bytes() {
            Ok(host) => host.to_vec(),
            Err(_) => tensor.to_host()?.bytes()?.to_vec(),
        };
        self.post(site, op.desc, data, None)
    }

    /// Posts a receive into `tensor` from rank `src` and returns at once
    /// (`torch.distributed.irecv`). `tensor` stays borrowed until [`Request::wait`], which
    /// writes the data into it.
    #[track_caller]
    pub fn irecv<'t, T: Element>(
        &mut self,
        tensor: &'t mut Tensor<T>,
        src: usize,
    ) -> Result<Request<'t>> {
        let site = CallSite::caller();
        let op = self
            .posting(site)
            .and_then(|c| c.recv(tensor, src))
            .map_err(|e| self.refused(e))?;
        let bytes = tensor.numel() * std::mem::size_of::<T>();
        self.post(site, op.desc, vec![0; bytes], Some(tensor.landing()))
    }

    /// The op builder for a posted message at `site`, once the guard agrees (posts may go to
    /// the rank itself, as batched calls may).
    fn posting(&self, site: CallSite) -> Result<Caller<'_>> {
        self.admitted(&self.world_group, site, true)
    }

    /// Hands a validated message and the buffer it owns to the backend.
    fn post<'t>(
        &mut self,
        site: CallSite,
        desc: OpDesc,
        data: Vec<u8>,
        into: Option<crate::request::Landing<'t>>,
    ) -> Result<Request<'t>> {
        let ticket = engine(&self.backend)?.post(PostedOp { desc, data })?;
        Ok(Request::new(Rc::clone(&self.backend), ticket, into, site))
    }

    /// Runs a rank program, then waits for every request it left posted (their data is
    /// discarded): the rank counts as finished only when its messages are.
    pub(crate) fn run<T>(&mut self, f: impl FnOnce(&mut Ctx) -> Result<T>) -> Result<T> {
        let value = f(self)?;
        engine(&self.backend)?.drain()?;
        Ok(value)
    }

    /// `e`, the failure of a call refused before it reached the backend — unless this rank left
    /// a broadcast or scatter early (`exec::local::eager`) and settling it fails first. In the
    /// verifier's model the rank is still inside that call until every member reaches it, so
    /// a member that never does (a deadlock) or one that disagrees is what the run reports, as
    /// it is before any call the backend runs.
    fn refused(&self, e: Error) -> Error {
        match engine(&self.backend).and_then(|mut b| b.settle_left()) {
            Ok(()) => e,
            Err(first) => first,
        }
    }

    /// The error for a rule this rank's call at `site` broke (a refusal: see [`Ctx::refused`]).
    fn misuse(&self, site: CallSite, violation: rules::Violation) -> Error {
        self.refused(Error::Misuse {
            site,
            rank: self.rank,
            violation,
        })
    }

    /// Collectives on `group` instead of the world: `ctx.group(&g).all_reduce(&mut t, op)`.
    pub fn group<'c>(&'c mut self, group: &'c Group) -> Comm<'c> {
        Comm { ctx: self, group }
    }

    /// Starts a batch: ops recorded on it are posted together by [`Batch::run`] and complete
    /// together (≈ `batch_isend_irecv`, `ncclGroupStart/End`). Same-kind collectives in a batch
    /// are fused into one synchronisation.
    pub fn batch<'a>(&mut self) -> Batch<'_, 'a> {
        let ops = std::mem::take(&mut self.spare_ops);
        let words = std::mem::take(&mut self.spare_words);
        let kept = self.spare_serial.take();
        Batch {
            ctx: self,
            ops,
            words,
            kept,
            serial: None,
            recorded: 0,
            repeated: 0,
            order: TargetOrder {
                last: 0,
                kept: true,
            },
            staged: Vec::new(),
            members: Vec::new(),
            error: None,
            _borrows: PhantomData,
        }
    }

    /// The op builder for one call on `group`, once [`Ctx::admit`] let the call through: what
    /// every call that is described passes.
    #[inline]
    fn admitted<'g>(&self, group: &'g Group, site: CallSite, batched: bool) -> Result<Caller<'g>> {
        self.admit(group, &site)?;
        Ok(Caller {
            rank: self.rank,
            world: self.world,
            group,
            site,
            batched,
            device: self.device,
        })
    }

    /// What every call passes, described or reused (see [`Ctx::recall`]): the guard agrees that
    /// the call at `site` is on schedule, and `group` is a handle of this world (another
    /// world's id would name another communicator, or none, in this one). A call that reuses an
    /// op builds no `Caller` only to drop it: its copy of the call site, just stored, stalls the
    /// loads that read it back (measured on a bucket's recording).
    #[inline(always)]
    fn admit(&self, group: &Group, site: impl crate::guard::Site) -> Result<()> {
        crate::guard::Guard::check(site)?;
        if group.world_id() != self.world_group.world_id() {
            return Err(self.foreign(group, site.site()));
        }
        Ok(())
    }

    /// The error of a call on a group handle from another world.
    #[cold]
    fn foreign(&self, group: &Group, site: CallSite) -> Error {
        Error::ForeignGroup {
            site,
            rank: self.rank,
            members: group.members().to_vec(),
        }
    }

    fn run_one<B: Parts>(
        &mut self,
        group: Option<&Group>,
        site: CallSite,
        keep: Option<(Shape, Loc)>,
        build: impl FnOnce(&Caller<'_>) -> Result<B>,
    ) -> Result<()> {
        let group = group.unwrap_or(&self.world_group);
        let mut built = self.admitted(group, site, false).and_then(|c| build(&c));
        // The op is used where the builder left it: moving a just-written op (hundreds of
        // bytes) to another place stalls every load on the stores still in flight.
        let (op, staged) = match &mut built {
            Ok(b) => b.parts(),
            Err(_) => {
                return Err(self.refused(built.err().unwrap_or_else(|| {
                    Error::Internal("a refused call without its error".into())
                })));
            }
        };
        execute_one(&self.backend, &mut self.trace, op, group)?;
        if let Some(staged) = staged {
            staged.finish()?;
        }
        // Kept after the call, so that the move does not delay it (see `Ctx::recall`).
        if let Some((output_shape, loc)) = keep
            && let Ok(b) = built
        {
            let op = b.into_op();
            if let Some(slot) = self.last.get_mut(op.desc.kind as usize) {
                *slot = Some(Validated {
                    op,
                    output_shape,
                    loc,
                    misses: 0,
                });
            }
        }
        Ok(())
    }

    /// Whether `call` repeats the last lone call of its kind exactly — the same kind,
    /// communicator, root, reduction, element type, shapes, `dim`, call site, and the same host
    /// buffers — and, if not, whether to keep it for the next call. Validation depends on
    /// nothing else (and on the rank, the world and the communicator's members, fixed for a
    /// context and a communicator id), so a repeat would pass it the same way.
    ///
    /// A call that does not repeat is kept unless the kept call comes from the same site and
    /// has given way fewer than [`KEEP_AFTER_MISSES`] times: a loop over many tensors from one
    /// site (an all_reduce per parameter) then pays for keeping one call in eight, a loop that
    /// alternates two tensors still repeats one of them, and a site that settles on a new
    /// tensor repeats again after a few calls.
    #[inline(always)] // the key stays in registers
    fn recall(&mut self, call: &CallKey<'_>, loc: Loc) -> Recall {
        let Some(slot) = self.last.get_mut(call.kind as usize) else {
            return Recall::Miss { keep: false };
        };
        let Some(last) = slot else {
            return Recall::Miss { keep: true };
        };
        // One `Location` per place in the source: equal addresses, the same site (a copy of
        // the same place elsewhere only makes the call look new). Compared by address, the
        // site is never built: its fields, stored one by one and read back whole, would make
        // the reads wait for the stores, and those wait behind the last call's stores to lines
        // its peers read (half of a small broadcast's time at world 2).
        if !std::ptr::eq(last.loc, loc) {
            return Recall::Miss { keep: true };
        }
        if repeats(&last.op, &last.output_shape, call) {
            // Equal addresses, but the kept pointers may come from a tensor since freed, whose
            // address a new one now has: the op uses the pointers of this call's tensors.
            last.op.input.ptr = call.input.0;
            last.op.output.ptr = call.output.0;
            return Recall::Repeat;
        }
        last.misses = last.misses.saturating_add(1);
        Recall::Miss {
            keep: last.misses >= KEEP_AFTER_MISSES,
        }
    }

    /// Runs the kept call of `kind` again (see [`Ctx::recall`]): [`Ctx::run_one`] without
    /// describing and validating it. The guard's check of the call site and the check of the
    /// group handle still run. Inlined into the call's method: a repeat is the path where a
    /// frame's saves and restores are a visible part of a small call's time. Always: with a
    /// plain `#[inline]`, this and `execute_one` stayed calls, 22 of a repeated 8-byte
    /// broadcast's 125 stores (callgrind) and 5 of its 45 ns at world 1 (`docs/decisions.md`).
    #[inline(always)]
    fn rerun(&mut self, group: Option<&Group>, kind: OpKind) -> Result<()> {
        let g = group.unwrap_or(&self.world_group);
        let missing = || Error::Internal("a repeated call without the call it repeats".into());
        let Some(kept) = self.last.get(kind as usize).and_then(Option::as_ref) else {
            return Err(missing());
        };
        // The kept op's site is this call's (`recall` found the same `Location`), and long
        // stored: read in place, it costs no wait (see `Ctx::recall`). What `admit` checks, in
        // its order; then the root, which the repeat names as the kept call did.
        let site = &kept.op.desc.site;
        let admitted = crate::guard::Guard::check(site).and_then(|()| {
            if g.world_id() != self.world_group.world_id() {
                return Err(self.foreign(g, *site));
            }
            crate::guard::Guard::check_peer(kept.op.desc.peer, site)
        });
        if let Err(e) = admitted {
            return Err(self.refused(e));
        }
        let Some(op) = self
            .last
            .get_mut(kind as usize)
            .and_then(Option::as_mut)
            .map(|v| &mut v.op)
        else {
            return Err(missing());
        };
        execute_one(&self.backend, &mut self.trace, op, g)
    }

    /// A lone broadcast, reduce or all_reduce of `t`: [`Ctx::rerun`] if it repeats the last
    /// one of its kind, else [`Ctx::run_one`].
    #[inline(always)]
    fn in_place_one<T: Element>(
        &mut self,
        group: Option<&Group>,
        loc: Loc,
        kind: OpKind,
        t: &mut Tensor<T>,
        root: Option<usize>,
        op: Option<ReduceOp>,
    ) -> Result<()> {
        let id = group.unwrap_or(&self.world_group).id();
        let recall = match in_place_key(id, None, kind, t, root, op) {
            Some(key) => self.recall(&key, loc),
            None => Recall::Miss { keep: false },
        };
        match recall {
            Recall::Repeat => self.rerun(group, kind),
            Recall::Miss { keep } => {
                let keep = keep.then(|| (Shape::new(), loc));
                let site = CallSite::from(loc);
                self.run_one(group, site, keep, move |c| c.in_place(kind, t, root, op))
            }
        }
    }

    /// [`Ctx::in_place_one`] for an all_gather, reduce_scatter or all_to_all of `x` into `out`.
    #[allow(clippy::too_many_arguments)] // one call's parts, as the public method takes them
    fn in_out_one<T: Element>(
        &mut self,
        group: Option<&Group>,
        loc: Loc,
        kind: OpKind,
        x: &Tensor<T>,
        out: &mut Tensor<T>,
        op: Option<ReduceOp>,
        dim: usize,
    ) -> Result<()> {
        let id = group.unwrap_or(&self.world_group).id();
        let recall = match in_out_key(id, None, kind, x, out, op, dim) {
            Some(key) => self.recall(&key, loc),
            None => Recall::Miss { keep: false },
        };
        match recall {
            Recall::Repeat => self.rerun(group, kind),
            Recall::Miss { keep } => {
                // The output's shape, which validation reads, is kept with the op.
                let keep = keep.then(|| (Shape::from_slice(out.shape()), loc));
                let site = CallSite::from(loc);
                self.run_one(group, site, keep, move |c| c.in_out(kind, x, out, op, dim))
            }
        }
    }

    fn sink<B: Parts>(
        &mut self,
        site: CallSite,
        build: impl FnOnce(&Caller<'_>) -> Result<B>,
    ) -> Result<()> {
        self.run_one(None, site, None, build)
    }

    /// This context and the whole world, for the lone forms.
    fn target(&mut self) -> (&mut Ctx, Option<&Group>) {
        (self, None)
    }

    lone_sinks!();
    comm_methods!('_, Result<()>);
}

/// Collectives on one group: see [`Ctx::group`].
pub struct Comm<'c> {
    ctx: &'c mut Ctx,
    group: &'c Group,
}

impl Comm<'_> {
    fn sink<B: Parts>(
        &mut self,
        site: CallSite,
        build: impl FnOnce(&Caller<'_>) -> Result<B>,
    ) -> Result<()> {
        self.ctx.run_one(Some(self.group), site, None, build)
    }

    /// The context and this group, for the lone forms.
    fn target(&mut self) -> (&mut Ctx, Option<&Group>) {
        (self.ctx, Some(self.group))
    }

    lone_sinks!();
    comm_methods!('_, Result<()>);
}

/// Whether `call` repeats `op` (validated with `output_shape`) exactly: the same kind,
/// communicator, root, reduction, element type, shapes, `dim`, and the same host buffers; the
/// caller has found the same call site (by its `Location`, [`Ctx::recall`]). Validation depends
/// on nothing else (and on the rank, the world and the communicator's members, fixed for a
/// context and a communicator id), so a repeat would pass it the same way.
#[inline(always)] // the key stays in registers
fn repeats(op: &Op, output_shape: &[usize], call: &CallKey<'_>) -> bool {
    let d = &op.desc;
    d.kind == call.kind
        && d.group == call.group
        && d.peer == call.peer
        && d.op == call.op
        && d.dtype == call.dtype
        && d.dim == call.dim
        && (op.input.ptr, op.input.len) == call.input
        && (op.output.ptr, op.output.len) == call.output
        && !op.input.on_device
        && !op.output.on_device
        && same_dims(&d.shape, call.shape)
        && same_dims(output_shape, call.output_shape)
}

/// The key of a broadcast, reduce or all_reduce of `t` (see [`repeats`]); `None` for a tensor
/// on a device, whose calls are never reused.
#[inline(always)]
fn in_place_key<'t, T: Element>(
    group: GroupId,
    site: Option<Loc>,
    kind: OpKind,
    t: &'t mut Tensor<T>,
    root: Option<usize>,
    op: Option<ReduceOp>,
) -> Option<CallKey<'t>> {
    if t.device() != Device::Host {
        return None;
    }
    let (ptr, len) = t.raw_mut();
    let buf = (ptr.cast(), len);
    Some(CallKey {
        kind,
        group,
        peer: root,
        op,
        dtype: T::DTYPE,
        shape: t.shape(),
        dim: 0,
        output_shape: &[],
        input: buf,
        output: buf,
        site,
    })
}

/// The key of an all_gather, reduce_scatter or all_to_all of `x` into `out`.
#[inline(always)]
fn in_out_key<'t, T: Element>(
    group: GroupId,
    site: Option<Loc>,
    kind: OpKind,
    x: &'t Tensor<T>,
    out: &'t mut Tensor<T>,
    op: Option<ReduceOp>,
    dim: usize,
) -> Option<CallKey<'t>> {
    if x.device() != Device::Host || out.device() != Device::Host {
        return None;
    }
    let ((xp, xn), (outp, outn)) = (x.raw(), out.raw_mut());
    Some(CallKey {
        kind,
        group,
        peer: None,
        op,
        dtype: T::DTYPE,
        shape: x.shape(),
        dim,
        output_shape: out.shape(),
        input: (xp.cast_mut().cast(), xn),
        output: (outp.cast(), outn),
        site,
    })
}

/// Runs one call's op on the backend, recording it when tracing. Inlined always, as
/// [`Ctx::rerun`] is.
#[inline(always)]
fn execute_one(
    backend: &SharedBackend,
    trace: &mut Option<Recorder>,
    op: &mut Op,
    group: &Group,
) -> Result<()> {
    let start = trace.as_ref().map(Recorder::now);
    let done = engine(backend)?.execute(std::slice::from_mut(op));
    if let (Some(rec), Some(start)) = (trace, start) {
        rec.record(
            [(&op.desc, traced_members(op, group))],
            false,
            start,
            done.is_ok(),
        );
    }
    // A fresh `Ok`: moving the whole (large) `Result` just written stalls (see
    // `docs/decisions.md`, "A lone call moves nothing large").
    match done {
        Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The group members a trace records for `op`: none for point-to-point.
fn traced_members(op: &Op, group: &Group) -> Arc<[usize]> {
    if op.desc.kind.is_p2p() {
        Arc::from([])
    } else {
        group.members_arc()
    }
}

/// Ops posted together: see [`Ctx::batch`]. Tensors stay borrowed until the batch is run or
/// dropped. A mistake in any recorded call is reported by [`Batch::run`], before anything is
/// posted.
#[must_use = "a batch does nothing until `run()` is called"]
pub struct Batch<'c, 'a> {
    ctx: &'c mut Ctx,
    /// The ops recorded (the first `recorded`), then the rest of the last batch's, which the
    /// calls still to come are compared with (see [`Batch::repeat`]).
    ops: Vec<Op>,
    /// Beside each op, the key of the call that made it (see [`CallWords`]); as long as `ops`.
    words: Vec<Option<CallWords>>,
    /// The number of the batch whose ops `ops` started as, if it ran.
    kept: Option<u64>,
    /// This batch's number, once it runs.
    serial: Option<u64>,
    recorded: usize,
    /// How many of the calls recorded repeated the last batch's op at their place.
    repeated: usize,
    /// Whether the ops came in target order: backends run a batch sorted by target, reordering
    /// `ops` in place; the keys in `words` stay in the order written, so after a reordered
    /// batch they no longer describe the op at their place, and that batch leaves nothing to
    /// repeat.
    order: TargetOrder,
    /// The staging of the list forms among `ops`, finished after the run.
    staged: Vec<Staged>,
    /// Each op's group members, kept only while tracing.
    members: Vec<Arc<[usize]>>,
    error: Option<Error>,
    _borrows: PhantomData<&'a mut ()>,
}

/// The target (see `plan`) of the last op a batch recorded, as its `order_key`, and whether
/// every op so far came in target order.
struct TargetOrder {
    last: u64,
    kept: bool,
}

impl TargetOrder {
    /// Notes the next op's target key.
    #[inline(always)]
    fn note(&mut self, key: u64) {
        self.kept &= self.last <= key;
        self.last = key;
    }
}

impl<'c, 'a> Batch<'c, 'a> {
    // Out of line: the path of a call that repeats the last batch's stays small around it.
    #[inline(never)]
    fn record<B: Parts>(
        &mut self,
        group: Option<&Group>,
        site: CallSite,
        words: Option<CallWords>,
        build: impl FnOnce(&Caller<'_>) -> Result<B>,
    ) -> &mut Self {
        if self.error.is_none() {
            let group = group.unwrap_or(&self.ctx.world_group);
            match self.ctx.admitted(group, site, true).and_then(|c| build(&c)) {
                Ok(mut built) => {
                    let (_, staged) = built.parts();
                    let op = built.into_op();
                    if self.ctx.trace.is_some() {
                        self.members.push(traced_members(&op, group));
                    }
                    // The last batch's ops from here on no longer line up with this one's.
                    self.ops.truncate(self.recorded);
                    self.words.truncate(self.recorded);
                    self.order.note(crate::plan::target(&op).order_key());
                    self.ops.push(op);
                    self.words.push(words);
                    self.recorded += 1;
                    if let Some(staged) = staged {
                        self.staged.push(staged);
                    }
                }
                Err(e) => self.error = Some(e),
            }
        }
        self
    }

    /// Whether the call with key `key`, the next call this batch records, repeats the last
    /// batch's call at the same place (equal keys: see [`repeats`] for what that covers): its
    /// buffers (input, output) for a repeat to take, or its words for a call to keep.
    #[inline(always)]
    fn check_repeat(&self, key: &CallKey<'_>) -> Seen {
        let i = self.recorded;
        match self.words.get(i) {
            Some(Some(words)) if i < self.ops.len() && words_match(words, key) => {
                Seen::Repeat(key.input.0, key.output.0)
            }
            _ => Seen::New(call_words(key)),
        }
    }

    /// Records a broadcast, reduce, all_reduce, all_gather, reduce_scatter or all_to_all made
    /// at `loc` that [`Batch::check_repeat`] found repeating the last batch's call at the same
    /// place: keeps that call's op, with this call's buffers `bufs` (input, output), instead of
    /// describing and validating the call again (another call is [`Batch::record`]ed, with its
    /// key's words). The guard's check of the call site and of the group handle run as for a
    /// new call.
    #[inline(always)] // the path of every call of a repeated bucket
    fn repeat(&mut self, group: Option<&Group>, loc: Loc, bufs: (*mut u8, *mut u8)) -> &mut Self {
        if self.error.is_some() {
            return self; // the batch is refused already
        }
        let g = group.unwrap_or(&self.ctx.world_group);
        if let Err(e) = self.ctx.admit(g, loc) {
            self.error = Some(e);
            return self;
        }
        // The six forms that repeat are collectives: their target is their communicator.
        self.order
            .note(crate::plan::Target::Coll(g.id()).order_key());
        let Some(op) = self.ops.get_mut(self.recorded) else {
            self.error = Some(Error::Internal(
                "a repeated call without the call it repeats".into(),
            ));
            return self;
        };
        // The repeat names the kept call's root (it is part of what repeats).
        if let Err(e) = crate::guard::Guard::check_peer(op.desc.peer, loc) {
            self.error = Some(e);
            return self;
        }
        // Equal addresses, but the kept pointers may be a freed tensor's (see `Ctx::recall`).
        (op.input.ptr, op.output.ptr) = bufs;
        if self.ctx.trace.is_some() {
            let members = traced_members(op, g);
            self.members.push(members);
        }
        self.recorded += 1;
        self.repeated += 1;
        self
    }

    fn sink<B: Parts>(
        &mut self,
        site: CallSite,
        build: impl FnOnce(&Caller<'_>) -> Result<B>,
    ) -> &mut Self {
        self.record(None, site, None, build)
    }

    /// This batch and the whole world, for the forms `Batch::repeat` keeps (or describes anew).
    fn recorder(&mut self) -> (&mut Batch<'c, 'a>, Option<&Group>) {
        (self, None)
    }

    recorded_sinks!('a);
    comm_methods!('a, &mut Self);

    /// Collectives on `group` within this batch.
    pub fn group<'b>(&'b mut self, group: &'b Group) -> BatchComm<'b, 'c, 'a> {
        BatchComm { batch: self, group }
    }

    /// Number of ops recorded.
    pub fn len(&self) -> usize {
        self.recorded
    }

    /// Whether no op was recorded.
    pub fn is_empty(&self) -> bool {
        self.recorded == 0
    }

    /// Posts every recorded op and waits until all have completed on this rank.
    pub fn run(mut self) -> Result<()> {
        // Every call repeated the last batch's op at its place, and that batch had no more.
        let again = self.repeated == self.recorded && self.ops.len() == self.recorded;
        self.ops.truncate(self.recorded);
        self.words.truncate(self.recorded);
        if let Some(e) = self.error.take() {
            // A batch refused as a whole leaves nothing to repeat (`drop` sees no error now).
            self.ops.clear();
            self.words.clear();
            return Err(self.ctx.refused(e));
        }
        if self.ops.is_empty() {
            return Ok(());
        }
        let mark = BatchMark {
            serial: self.ctx.batches,
            repeats: self.kept.filter(|_| again),
        };
        self.ctx.batches += 1;
        self.serial = Some(mark.serial);
        let start = self.ctx.trace.as_ref().map(Recorder::now);
        // The backend may reorder the ops (by target): the trace keeps them as written, each
        // with the members recorded beside it.
        let written: Vec<OpDesc> = match start {
            Some(_) => self.ops.iter().map(|o| o.desc.clone()).collect(),
            None => Vec::new(),
        };
        let done = engine(&self.ctx.backend)?.execute_batch(&mut self.ops, mark);
        if let (Some(t), Some(start)) = (&mut self.ctx.trace, start) {
            let calls = written.iter().zip(self.members.drain(..));
            t.record(calls, true, start, done.is_ok());
        }
        done?;
        self.staged.drain(..).try_for_each(Staged::finish)
    }
}

impl Drop for Batch<'_, '_> {
    /// Hands the ops recorded back to the context, for the next batch to compare its calls
    /// with (see `Batch::repeat`); the borrows of tensors they stand for end here,
    /// and their pointers are not read again.
    fn drop(&mut self) {
        let (mut ops, mut words) = (
            std::mem::take(&mut self.ops),
            std::mem::take(&mut self.words),
        );
        if self.error.is_some() || !self.order.kept {
            // A batch refused as a whole leaves nothing to repeat; nor does one the backend
            // reordered, whose ops no longer line up with their keys.
            ops.clear();
            words.clear();
        }
        ops.truncate(self.recorded);
        words.truncate(self.recorded);
        self.ctx.spare_ops = ops;
        self.ctx.spare_words = words;
        self.ctx.spare_serial = self.serial;
    }
}

/// Collectives on one group within a batch: see [`Batch::group`].
pub struct BatchComm<'b, 'c, 'a> {
    batch: &'b mut Batch<'c, 'a>,
    group: &'b Group,
}

impl<'c, 'a> BatchComm<'_, 'c, 'a> {
    fn sink<B: Parts>(
        &mut self,
        site: CallSite,
        build: impl FnOnce(&Caller<'_>) -> Result<B>,
    ) -> &mut Self {
        self.batch.record(Some(self.group), site, None, build);
        self
    }

    /// The batch and this group, for the forms `Batch::repeat` keeps (or describes anew).
    fn recorder(&mut self) -> (&mut Batch<'c, 'a>, Option<&Group>) {
        (self.batch, Some(self.group))
    }

    recorded_sinks!('a);
    comm_methods!('a, &mut Self);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape of up to four dimensions with small sizes, and the edges of each width.
    fn shapes() -> Vec<Vec<usize>> {
        let mut all: Vec<Vec<usize>> = vec![vec![]];
        for len in 1..=4 {
            let top = if len <= 2 {
                (1 << 30) - 1
            } else {
                (1 << 14) - 1
            };
            let values = [0, 1, 2, 3, top - 1, top];
            let mut grow: Vec<Vec<usize>> = vec![vec![]];
            for _ in 0..len {
                grow = grow
                    .iter()
                    .flat_map(|s| values.iter().map(move |&v| [s.clone(), vec![v]].concat()))
                    .collect();
            }
            all.extend(grow);
        }
        all
    }

    #[test]
    fn dims_words_are_injective_and_refuse_what_does_not_fit() {
        let shapes = shapes();
        let mut seen = std::collections::HashMap::new();
        for s in &shapes {
            let w = dims_word(s).unwrap_or_else(|| panic!("{s:?} fits"));
            if let Some(other) = seen.insert(w, s.clone()) {
                panic!("{s:?} and {other:?} share a word");
            }
        }
        assert_eq!(dims_word(&[1 << 30]), None);
        assert_eq!(dims_word(&[1, 1 << 14, 1]), None);
        assert_eq!(dims_word(&[1; 5]), None);
    }

    #[test]
    fn call_words_tell_apart_keys_that_differ_in_any_part() {
        let (mut a, mut b, mut c) = ([0u8; 8], [0u8; 8], [0u8; 8]);
        // Two places on one line, and one on the next.
        let (site, next_column) = (Location::caller(), Location::caller());
        let next_line = Location::caller();
        let base = CallKey {
            kind: OpKind::AllReduce,
            group: GroupId(3),
            peer: None,
            op: Some(ReduceOp::Sum),
            dtype: DType::F32,
            shape: &[2, 3],
            dim: 0,
            output_shape: &[],
            input: (a.as_mut_ptr(), 6),
            output: (a.as_mut_ptr(), 6),
            site: Some(site),
        };
        let words = call_words(&base).expect("fits");
        assert!(words_match(&words, &base));
        let changed: Vec<CallKey<'_>> = vec![
            CallKey {
                kind: OpKind::Reduce,
                ..base
            },
            CallKey {
                group: GroupId(4),
                ..base
            },
            CallKey {
                peer: Some(0),
                ..base
            },
            CallKey {
                peer: Some(1),
                ..base
            },
            CallKey {
                op: Some(ReduceOp::Max),
                ..base
            },
            CallKey {
                op: Some(ReduceOp::PreMulSum(2.0)),
                ..base
            },
            CallKey { op: None, ..base },
            CallKey {
                dtype: DType::I32,
                ..base
            },
            CallKey {
                shape: &[3, 2],
                ..base
            },
            CallKey {
                shape: &[6],
                ..base
            },
            CallKey { dim: 1, ..base },
            CallKey {
                output_shape: &[2, 3],
                ..base
            },
            CallKey {
                input: (b.as_mut_ptr(), 6),
                ..base
            },
            CallKey {
                input: (a.as_mut_ptr(), 5),
                ..base
            },
            CallKey {
                output: (c.as_mut_ptr(), 6),
                ..base
            },
            CallKey {
                output: (a.as_mut_ptr(), 7),
                ..base
            },
            CallKey {
                site: Some(next_line),
                ..base
            },
            CallKey {
                site: Some(next_column),
                ..base
            },
        ];
        for (i, key) in changed.iter().enumerate() {
            assert!(!words_match(&words, key), "change {i} was not seen");
            let w = call_words(key).expect("fits");
            assert!(
                !words_match(&w, &base),
                "change {i} was not seen the other way"
            );
        }
        let scaled = CallKey {
            op: Some(ReduceOp::PreMulSum(2.0)),
            ..base
        };
        let w = call_words(&scaled).expect("fits");
        assert!(!words_match(
            &w,
            &CallKey {
                op: Some(ReduceOp::PreMulSum(3.0)),
                ..base
            }
        ));
        // Parts beyond their fields: no words, so such calls are never taken for repeats.
        assert!(
            call_words(&CallKey {
                dim: 1 << 16,
                ..base
            })
            .is_none()
        );
        assert!(
            call_words(&CallKey {
                peer: Some(1 << 31),
                ..base
            })
            .is_none()
        );
        assert!(
            call_words(&CallKey {
                shape: &[1; 5],
                ..base
            })
            .is_none()
        );
    }
}
