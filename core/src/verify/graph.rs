//! The wait-for graph of blocked ranks: strongly connected components and one representative
//! cycle each, for deadlock reports.

/// One representative cycle per strongly connected component of the wait-for graph (`edges[r]`
/// lists whom rank r waits for, and in which op), each starting at its smallest rank.
pub(super) fn cycles<T: Copy>(edges: &[Vec<(usize, T)>]) -> Vec<Vec<(usize, T)>> {
    let n = edges.len();
    let comp = scc(n, |v| edges[v].iter().map(|e| e.0));
    let mut out = Vec::new();
    let mut seen = vec![false; n];
    for start in 0..n {
        let c = comp[start];
        if seen[start] || edges[start].is_empty() {
            continue;
        }
        let size = comp.iter().filter(|&&x| x == c).count();
        let self_loop = edges[start].iter().any(|e| e.0 == start);
        if size < 2 && !self_loop {
            continue;
        }
        // Walk inside the component, always to the smallest next rank, until a rank repeats.
        let mut path: Vec<(usize, T)> = Vec::new();
        let mut pos = vec![usize::MAX; n];
        let mut v = start;
        loop {
            if pos[v] != usize::MAX {
                path.drain(..pos[v]);
                break;
            }
            let Some(&(w, at)) = edges[v]
                .iter()
                .filter(|e| comp[e.0] == c)
                .min_by_key(|e| e.0)
            else {
                break;
            };
            pos[v] = path.len();
            path.push((v, at));
            v = w;
        }
        for (r, x) in comp.iter().enumerate() {
            if *x == c {
                seen[r] = true;
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    out
}

/// Strongly connected components (iterative Tarjan): a component id per vertex.
fn scc<I: Iterator<Item = usize>>(n: usize, succ: impl Fn(usize) -> I) -> Vec<usize> {
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut comp = vec![usize::MAX; n];
    let mut next_index = 0;
    let mut next_comp = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, Vec<usize>, usize)> = vec![(root, succ(root).collect(), 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some((v, ws, i)) = call.last_mut() {
            let v = *v;
            if *i < ws.len() {
                let w = ws[*i];
                *i += 1;
                if index[w] == usize::MAX {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, succ(w).collect(), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some((u, _, _)) = call.last() {
                    low[*u] = low[*u].min(low[v]);
                }
                if low[v] == index[v] {
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp[w] = next_comp;
                        if w == v {
                            break;
                        }
                    }
                    next_comp += 1;
                }
            }
        }
    }
    comp
}
