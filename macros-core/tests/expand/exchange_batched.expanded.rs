fn exchange(ctx: &mut Ctx) -> Result<()> {
    let __rankwise_guard = {
        static __RANKWISE_SCHEDULE: ::rankwise::__private::Table = ::rankwise::__private::Table {
            function: "exchange",
            worlds: &[
                (
                    2usize,
                    &[
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[6u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[7u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[3u32],
                                    times: 1u32,
                                },
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[8u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[9u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[3u32],
                                    times: 1u32,
                                },
                            ],
                        },
                    ],
                ),
            ],
            sites: &[
                (7u32, 13u32, 4294967295u32, "send"),
                (8u32, 13u32, 4294967295u32, "recv"),
                (13u32, 9u32, 4294967295u32, "all_reduce"),
                (14u32, 9u32, 4294967295u32, "all_reduce"),
                (10u32, 13u32, 4294967295u32, "recv"),
                (11u32, 13u32, 4294967295u32, "send"),
                (7u32, 13u32, 1u32, "send"),
                (8u32, 13u32, 1u32, "recv"),
                (10u32, 13u32, 0u32, "recv"),
                (11u32, 13u32, 0u32, "send"),
            ],
        };
        ::rankwise::__private::Guard::enter(&__RANKWISE_SCHEDULE, &mut *ctx)?
    };
    let a = ctx.full([2], 1.0f32)?;
    let mut b = ctx.zeros::<f32>([2])?;
    let mut c = ctx.zeros::<f32>([3])?;
    let peer = 1 - ctx.rank();
    if ctx.rank() == 0 {
        {
            let mut __rankwise_batch = ctx.batch();
            __rankwise_batch.send(&a, peer);
            __rankwise_batch.recv(&mut b, peer);
            __rankwise_batch.run()?;
        }
    } else {
        {
            let mut __rankwise_batch = ctx.batch();
            __rankwise_batch.recv(&mut b, peer);
            __rankwise_batch.send(&a, peer);
            __rankwise_batch.run()?;
        }
    }
    {
        let mut __rankwise_batch = ctx.batch();
        __rankwise_batch.all_reduce(&mut c, ReduceOp::Sum);
        __rankwise_batch.all_reduce(&mut b, ReduceOp::Max);
        __rankwise_batch.run()?;
    }
    Ok(())
}
