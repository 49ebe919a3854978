fn shard(ctx: &mut Ctx) -> Result<()> {
    const _: () = ::core::assert!(
        1u128 * ((ROWS) as u128) % 2u128 == 0,
        "RW007: reduce_scatter splits dim 0 into 2 equal parts (world = 2), but ROWS is not a multiple of 2; make the dimension a multiple of 2"
    );
    const _: () = ::core::assert!(
        1u128 * ((ROWS) as u128) % 4u128 == 0,
        "RW007: reduce_scatter splits dim 0 into 4 equal parts (world = 4), but ROWS is not a multiple of 4; make the dimension a multiple of 4"
    );
    const _: () = {
        let _constant = ROWS;
    };
    let __rankwise_guard = {
        static __RANKWISE_SCHEDULE: ::rankwise::__private::Table = ::rankwise::__private::Table {
            function: "shard",
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
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
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
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
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
                            ],
                        },
                        ::rankwise::__private::RankTable {
                            runs: &[
                                ::rankwise::__private::Run {
                                    pattern: &[0u32],
                                    times: 1u32,
                                },
                            ],
                        },
                    ],
                ),
            ],
            sites: &[(6u32, 9u32, 4294967295u32, "reduce_scatter")],
        };
        ::rankwise::__private::Guard::enter(&__RANKWISE_SCHEDULE, &mut *ctx)?
    };
    let x = ctx.full([ROWS, 3], 1.0f32)?;
    let mut part = ctx.zeros::<f32>([ROWS / ctx.world(), 3])?;
    ctx.reduce_scatter(&x, &mut part, ReduceOp::Sum, 0)?;
    Ok(())
}
