fn apart(ctx: &mut Ctx) -> Result<()> {
    let __rankwise_guard = {
        static __RANKWISE_SCHEDULE: ::rankwise::__private::Table = ::rankwise::__private::Table {
            function: "apart",
            worlds: &[
                (
                    2usize,
                    &[
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[4u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[5u32],
                                    times: 1u32,
                                },
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[4u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[5u32],
                                    times: 1u32,
                                },
                            ],
                        },
                    ],
                ),
                (
                    4usize,
                    &[
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[4u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[6u32],
                                    times: 1u32,
                                },
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[4u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[6u32],
                                    times: 1u32,
                                },
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[4u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[6u32],
                                    times: 1u32,
                                },
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[4u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[2u32],
                                    times: 1u32,
                                },
                                ::rankwise::__private::Run {
                                    pattern: &[6u32],
                                    times: 1u32,
                                },
                            ],
                        },
                    ],
                ),
            ],
            sites: &[
                (5u32, 9u32, 4294967295u32, "all_reduce"),
                (6u32, 9u32, 4294967295u32, "broadcast"),
                (7u32, 9u32, 4294967295u32, "barrier"),
                (8u32, 9u32, 4294967295u32, "broadcast"),
                (6u32, 9u32, 0u32, "broadcast"),
                (8u32, 9u32, 1u32, "broadcast"),
                (8u32, 9u32, 3u32, "broadcast"),
            ],
        };
        ::rankwise::__private::Guard::enter(&__RANKWISE_SCHEDULE, &mut *ctx)?
    };
    let mut t = ctx.full([4], 1.0f32)?;
    ctx.all_reduce(&mut t, ReduceOp::Sum)?;
    ctx.broadcast(&mut t, 0)?;
    ctx.barrier()?;
    ctx.broadcast(&mut t, ctx.world() - 1)?;
    Ok(())
}
