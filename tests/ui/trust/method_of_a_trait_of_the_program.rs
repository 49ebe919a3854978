use rankwise::prelude::*;

// A trait of the program that gives a list a method named like one of the slice's is picked by
// Rust over the slice's. The macro followed the slice's: it verified each broadcast below with
// root 0 while the run used root 1 (the run-time guard stopped it). Traits it can see — in the
// function, or in a module under `#[rankwise::program]` — now make such a call one it does not
// follow. (Traits elsewhere in the crate are beyond what a macro sees: `book/src/proofs.md`.)

#[rankwise::program(world = 2)]
fn trait_in_the_function(ctx: &mut Ctx) -> Result<()> {
    trait Ends {
        fn first(&self) -> Option<&usize>;
    }
    impl Ends for Vec<usize> {
        fn first(&self) -> Option<&usize> {
            self.last()
        }
    }
    let mut t = ctx.full([2], 1.0f32)?;
    let peers = vec![0usize, 1];
    ctx.broadcast(&mut t, *peers.first().unwrap_or(&0))?;
    Ok(())
}

#[rankwise::program]
mod pipeline {
    use rankwise::prelude::*;

    pub trait Len {
        fn len(&self) -> usize;
    }

    impl Len for [usize; 2] {
        fn len(&self) -> usize {
            1
        }
    }

    #[rankwise::program(world = 2)]
    pub fn trait_in_the_module(ctx: &mut Ctx) -> Result<()> {
        let mut t = ctx.full([2], 1.0f32)?;
        let stages = [0usize, 0];
        ctx.broadcast(&mut t, stages.len() - 1)?;
        Ok(())
    }
}

fn main() {}
