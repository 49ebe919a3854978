//! The emulated GPU memory of `nccl-host`: host memory that a rank program can reach only the
//! way it reaches a GPU's — by copying (`to_vec`, `to_host`, printing) — so a program that runs
//! on the emulation makes no host access a GPU would refuse. The emulated engine addresses it
//! directly, as NCCL addresses device memory.

use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::tensor::{Device, DeviceMemory};

/// `len` bytes standing in for memory of `device`, 8-byte aligned (every element type's
/// alignment divides 8).
pub(crate) struct EmulatedMemory {
    device: Device,
    /// Owned words from `Box::into_raw` (freed in `Drop`): a raw pointer, not a `Box`, so the
    /// engine may write through `addr` while `&self` exists elsewhere without aliasing a
    /// unique borrow.
    words: NonNull<[u64]>,
    len: usize,
}

// SAFETY: the memory is owned; it is written only through `write` (`&mut self`) or by the
// engine during an op that borrows the tensor owning it mutably, and read through `read`
// (`&self`) or during an op that borrows the tensor — the borrow rules of `Tensor` order them.
unsafe impl Send for EmulatedMemory {}
// SAFETY: as for `Send`.
unsafe impl Sync for EmulatedMemory {}

impl EmulatedMemory {
    /// `len` zeroed bytes on `device`; failure to allocate is an `Err`.
    pub(crate) fn new(device: Device, len: usize) -> Result<EmulatedMemory> {
        let n = len.div_ceil(8);
        let mut v: Vec<u64> = Vec::new();
        v.try_reserve_exact(n)
            .map_err(|e| Error::Tensor(format!("cannot allocate {len} bytes on {device}: {e}")))?;
        v.resize(n, 0);
        let words = NonNull::from(Box::leak(v.into_boxed_slice()));
        Ok(EmulatedMemory { device, words, len })
    }

    fn check(&self, len: usize) -> Result<()> {
        if len == self.len {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "a copy of {len} bytes to or from {} bytes on {}",
                self.len, self.device
            )))
        }
    }
}

impl Drop for EmulatedMemory {
    fn drop(&mut self) {
        // SAFETY: `words` came from `Box::leak` in `new` and is freed only here.
        drop(unsafe { Box::from_raw(self.words.as_ptr()) });
    }
}

impl DeviceMemory for EmulatedMemory {
    fn device(&self) -> Device {
        self.device
    }

    fn len(&self) -> usize {
        self.len
    }

    fn addr(&self) -> *mut u8 {
        self.words.as_ptr().cast()
    }

    fn read(&self, into: &mut [u8]) -> Result<()> {
        self.check(into.len())?;
        // SAFETY: `words` holds at least `len` initialised bytes; `into` is another allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.addr(), into.as_mut_ptr(), self.len) };
        Ok(())
    }

    fn write(&mut self, from: &[u8]) -> Result<()> {
        self.check(from.len())?;
        // SAFETY: as in `read`, the other way.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), self.addr(), self.len) };
        Ok(())
    }

    fn duplicate(&self) -> Result<Box<dyn DeviceMemory>> {
        let mut copy = EmulatedMemory::new(self.device, self.len)?;
        // SAFETY: both hold `len` bytes; they are different allocations.
        unsafe { std::ptr::copy_nonoverlapping(self.addr(), copy.addr(), self.len) };
        copy.len = self.len;
        Ok(Box::new(copy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_and_out_keep_every_byte() {
        let mut m = EmulatedMemory::new(Device::Cuda(3), 13).expect("allocates");
        let data: Vec<u8> = (1..=13).collect();
        m.write(&data).expect("writes");
        let mut back = vec![0u8; 13];
        m.read(&mut back).expect("reads");
        assert_eq!(back, data);
        let d = m.duplicate().expect("duplicates");
        m.write(&[0; 13]).expect("writes");
        let mut back = vec![0u8; 13];
        d.read(&mut back).expect("reads the copy");
        assert_eq!(back, data, "the copy is its own memory");
        assert_eq!((d.device(), d.len()), (Device::Cuda(3), 13));
        assert!(m.read(&mut [0; 12]).is_err(), "a short copy is an error");
        assert_eq!(m.addr() as usize % 8, 0);
    }
}
