//! nginx's smooth weighted round robin ([`crate::smooth`]) in O(log n) a pick, for the
//! algorithms that pick by it (`weighted_round_robin`, `dynamic_wrr`, `capacity_weighted`,
//! `utilization_wrr`) or break ties by it among the least loaded (`least_conn`, `dwlc`,
//! `least_time`). It gives exactly the picks of [`SmoothWeights`](crate::smooth::SmoothWeights)
//! over the same candidates; `reference` keeps the linear code the tests compare it with.
//!
//! # The idea
//!
//! Every backend that takes part in a round gains its share `s = effective · ramp`, and the
//! one with the highest `current` (the first on a tie) gives back the round's total. Between
//! two changes of a backend (it wins, it fails, it leaves or joins the candidates) its
//! `current` is therefore a line in the number of rounds played: `c = b + s · x`. Picking is
//! finding the highest of n lines at the next `x`, ties to the lowest index: a *kinetic
//! tournament* (Basch, Guibas and Hershberger, "Data structures for mobile data", 1999). Each
//! node of a tree over the backends in pool order keeps the winner of its subtree and the
//! round at which the loser's line will overtake the winner's (its certificate); a pick only
//! revisits nodes whose certificate has run out, and the winner's line, moved down by the
//! round's total, is replayed along its path: O(log n) a change.
//!
//! # Levels: the least loaded only
//!
//! `least_conn` and its kin play the round only among the backends at the lowest load (and
//! only when two or more tie there). Each backend is filed under its *level* — its load as a
//! reduced fraction, `in_flight / share` or `eta / share` — and each level keeps its own round
//! count, which moves only while that level is the lowest: a backend's `current` stands still
//! while it is not among the least loaded, exactly as in the linear code. The tree's nodes
//! compare levels first (the lower wins outright) and lines only within a level. For the
//! weighted round robins every usable backend is at the one level `0/1`.
//!
//! # What is not a line
//!
//! A backend whose effective weight is below its weight (after a failure, or a rebuild that
//! raised weights) climbs one unit a round, so its `current` is not a line: such *climbing*
//! backends are played one by one beside the tree, and rejoin it once they are back at their
//! weight. That costs O(1) a pick per climbing backend of the lowest level, for the
//! `weight − effective` rounds the climb lasts.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::algorithms::least_time::{rt_window, shaped_rt_ms};
use crate::backend::{BackendId, Backends};
use crate::balancer::{Completion, Outcome, PickCtx};
use crate::tracking::{Stale, Tracker, failure_window};

/// No backend, no level.
const NONE: u32 = u32::MAX;
/// A certificate that never runs out.
const NEVER: u64 = u64::MAX;

/// How backends are ranked before the smooth round, and who plays it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Score {
    /// Every usable backend plays every round (the weighted round robins).
    #[default]
    Flat,
    /// The fewest requests in flight per unit of share; the round only among the tied
    /// (`least_conn`, `dwlc`).
    Conns,
    /// The lowest `eta = rt · (1 + in_flight)` per unit of share; the round only among the
    /// tied (`least_time`).
    Eta,
}

/// A node of the tournament: the lowest level in its subtree, the leader among that level's
/// backends that are lines (`NONE` if all of them climb) with a copy of its line (so that
/// comparing two nodes reads the two nodes and nothing else: at 10,000 backends the tree does
/// not stay in cache, and each read elsewhere is a miss), and the round of that level at which
/// the leader may change.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// The leader's `b` and `s` in `b + s · x`.
    b: i64,
    s: i64,
    expires: u64,
    level: u32,
    leader: u32,
}

const EMPTY: Node = Node {
    b: 0,
    s: 0,
    expires: NEVER,
    level: NONE,
    leader: NONE,
};

impl Node {
    /// The leader's line at round `x`.
    #[inline]
    fn at(&self, x: u64) -> i64 {
        line_at(self.b, self.s, x)
    }
}

/// One load level: a reduced fraction and its own count of rounds played.
#[derive(Debug, Clone, Default)]
struct Level {
    num: u64,
    den: u64,
    /// Rounds played at this level (while it was the lowest).
    rounds: u64,
    /// Usable backends at this level.
    members: u32,
    /// The sum of the shares of its members that are lines.
    line_share: i64,
    /// Its members that climb.
    climbing: Vec<u32>,
}

/// A multiplicative hash for level keys: the map is looked up on every change of a backend's
/// load, and SipHash's resistance to chosen keys buys nothing for numbers the pool computes.
#[derive(Debug, Default, Clone)]
struct LevelHasher(u64);

impl Hasher for LevelHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct SmoothIndex {
    score: Score,
    weight: Vec<i64>,
    ramp: Vec<i64>,
    max_fails: Vec<u32>,
    effective: Vec<i64>,
    /// A backend's `current` if it is not a line in a level; else `b` in `b + s · rounds`.
    value: Vec<i64>,
    /// Its level, `NONE` if it is not usable now.
    level_of: Vec<u32>,
    /// Whether `value` is a line (a usable backend at its full effective weight).
    line: Vec<bool>,
    /// Where it is in its level's `climbing`.
    climb_at: Vec<u32>,
    levels: Vec<Level>,
    free_levels: Vec<u32>,
    by_fraction: HashMap<(u64, u64), u32, BuildHasherDefault<LevelHasher>>,
    /// Leaves at `size..2·size`, root at 1.
    size: usize,
    tree: Vec<Node>,
    tracker: Tracker,
    /// Scratch: backends to look at again, excluded for one pick, done climbing.
    scratch: Vec<u32>,
    excluded: Vec<u32>,
    settled: Vec<u32>,
}

/// `b + s · x` in wrapping arithmetic. The values compared are `current`s, which the linear
/// code holds in `i64` too; a line's `b` (`current − s · rounds`) may leave that range after
/// many rounds, but arithmetic modulo 2⁶⁴ still gives every `current` exactly.
#[inline]
fn line_at(b: i64, s: i64, x: u64) -> i64 {
    b.wrapping_add(s.wrapping_mul(x as i64))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `num / den` in lowest terms (`0/1` for zero), so that equal loads share one level.
fn reduced(num: u64, den: u64) -> (u64, u64) {
    if num == 0 {
        return (0, 1);
    }
    let g = gcd(num, den).max(1);
    (num / g, den / g)
}

impl SmoothIndex {
    pub(crate) fn new(score: Score) -> SmoothIndex {
        SmoothIndex {
            score,
            ..SmoothIndex::default()
        }
    }

    #[inline]
    fn share(&self, i: usize) -> i64 {
        self.effective[i] * self.ramp[i]
    }

    /// Backend `i`'s line evaluated at round `x` of its level.
    #[inline]
    fn at(&self, i: usize, x: u64) -> i64 {
        line_at(self.value[i], self.share(i), x)
    }

    /// Backend `i`'s `current`, as the linear code would hold it.
    fn current_of(&self, i: usize) -> i64 {
        if self.line[i] {
            self.at(i, self.levels[self.level_of[i] as usize].rounds)
        } else {
            self.value[i]
        }
    }

    /// Every backend's `current`, as [`SmoothWeights`](crate::smooth::SmoothWeights) holds it.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Vec<i64> {
        (0..self.value.len()).map(|i| self.current_of(i)).collect()
    }

    #[cfg(test)]
    pub(crate) fn effective(&self) -> Vec<i64> {
        self.effective.clone()
    }

    /// Takes the weights from `backends`, with [`SmoothWeights::rebuild`]'s rules (or
    /// [`SmoothWeights::rebuild_at_once`]'s if `at_once`), and files every backend again: O(n).
    ///
    /// [`SmoothWeights::rebuild`]: crate::smooth::SmoothWeights::rebuild
    /// [`SmoothWeights::rebuild_at_once`]: crate::smooth::SmoothWeights::rebuild_at_once
    pub(crate) fn rebuild(&mut self, backends: &Backends<'_>, at_once: bool) {
        let n = backends.len();
        self.materialize();
        let mut current = std::mem::take(&mut self.value);
        let weight: Vec<i64> = backends
            .ids()
            .map(|id| i64::from(backends.weight(id)))
            .collect();
        let old_total = crate::smooth::scale_total(&self.weight, &self.ramp);
        let changed = current.len() == n && self.weight != weight;
        if current.len() != n {
            current = vec![0; n];
            self.effective = weight.clone();
        } else if at_once {
            for ((e, &new), &old) in self.effective.iter_mut().zip(&weight).zip(&self.weight) {
                *e = (*e + new - old).max(0);
            }
        }
        self.weight = weight;
        self.ramp = backends
            .ids()
            .map(|id| i64::from(backends.state(id).ramp()))
            .collect();
        if changed {
            let new_total = crate::smooth::scale_total(&self.weight, &self.ramp);
            crate::smooth::rescale(&mut current, old_total, new_total);
        }
        self.max_fails = backends.ids().map(|id| backends.max_fails(id)).collect();
        for (e, &w) in self.effective.iter_mut().zip(&self.weight) {
            *e = (*e).min(w);
        }
        self.value = current;
        self.file_all(backends);
    }

    /// Turns every line back into its `current` (idempotent).
    fn materialize(&mut self) {
        for i in 0..self.line.len().min(self.value.len()) {
            if self.line[i] {
                self.value[i] = self.current_of(i);
                self.line[i] = false;
            }
        }
    }

    /// Files every backend under its level from scratch, keeping each one's `current`.
    fn file_all(&mut self, backends: &Backends<'_>) {
        let n = backends.len();
        self.materialize();
        self.value.resize(n, 0);
        self.level_of = vec![NONE; n];
        self.line = vec![false; n];
        self.climb_at = vec![0; n];
        self.levels.clear();
        self.free_levels.clear();
        self.by_fraction.clear();
        self.tracker.reset(n);
        self.size = n.next_power_of_two().max(1);
        self.tree = vec![EMPTY; 2 * self.size];
        for i in 0..n {
            let id = BackendId(i as u32);
            if let Some(fraction) = self.fraction(id, backends) {
                let level = self.level_for(fraction);
                self.enter(i, level);
            }
            self.tree[self.size + i] = self.leaf(i);
            self.schedule(id, backends);
        }
        for v in (1..self.size).rev() {
            self.tree[v] = self.combine(self.tree[2 * v], self.tree[2 * v + 1]);
        }
    }

    /// Backend `id`'s load as a fraction, `None` if it cannot be picked now.
    #[inline]
    fn fraction(&self, id: BackendId, backends: &Backends<'_>) -> Option<(u64, u64)> {
        if !backends.is_eligible(id) {
            return None;
        }
        Some(match self.score {
            Score::Flat => (0, 1),
            Score::Conns => reduced(u64::from(backends.in_flight(id)), backends.share(id)),
            Score::Eta => {
                let rt = shaped_rt_ms(backends, id, backends.now());
                let eta = rt.saturating_mul(1 + u64::from(backends.in_flight(id)));
                reduced(eta, backends.share(id))
            }
        })
    }

    /// Records how long what was just read of `id` holds by the clock alone.
    fn schedule(&mut self, id: BackendId, backends: &Backends<'_>) {
        let mut window = failure_window(backends, id);
        if self.score == Score::Eta && backends.is_eligible(id) {
            window = window.and(rt_window(backends, id, backends.now()));
        }
        self.tracker.read(id.index(), window);
    }

    /// The level of `fraction`, made if there is none.
    fn level_for(&mut self, fraction: (u64, u64)) -> u32 {
        if let Some(&l) = self.by_fraction.get(&fraction) {
            return l;
        }
        let level = Level {
            num: fraction.0,
            den: fraction.1,
            ..Level::default()
        };
        let l = match self.free_levels.pop() {
            Some(l) => {
                self.levels[l as usize] = level;
                l
            }
            None => {
                self.levels.push(level);
                (self.levels.len() - 1) as u32
            }
        };
        self.by_fraction.insert(fraction, l);
        l
    }

    /// Files usable backend `i` (its `value` its `current`) under `level`.
    fn enter(&mut self, i: usize, level: u32) {
        self.level_of[i] = level;
        self.levels[level as usize].members += 1;
        self.attach(i);
    }

    /// Takes backend `i` out of its level, leaving its `current` in `value`.
    fn leave(&mut self, i: usize) {
        let level = self.level_of[i];
        if level == NONE {
            return;
        }
        self.detach(i);
        self.level_of[i] = NONE;
        let l = &mut self.levels[level as usize];
        l.members -= 1;
        if l.members == 0 {
            let key = (l.num, l.den);
            self.by_fraction.remove(&key);
            self.free_levels.push(level);
        }
    }

    /// Makes `i` a line of its level if it is at full effective weight, a climber if not.
    fn attach(&mut self, i: usize) {
        let l = self.level_of[i] as usize;
        if self.effective[i] == self.weight[i] {
            let s = self.share(i);
            self.value[i] = line_at(self.value[i], s.wrapping_neg(), self.levels[l].rounds);
            self.levels[l].line_share += s;
            self.line[i] = true;
        } else {
            self.climb_at[i] = self.levels[l].climbing.len() as u32;
            self.levels[l].climbing.push(i as u32);
        }
    }

    /// The reverse of [`attach`](Self::attach): `value` back to `current`.
    fn detach(&mut self, i: usize) {
        let l = self.level_of[i] as usize;
        if self.line[i] {
            let s = self.share(i);
            self.value[i] = line_at(self.value[i], s, self.levels[l].rounds);
            self.levels[l].line_share -= s;
            self.line[i] = false;
        } else {
            let at = self.climb_at[i] as usize;
            let climbing = &mut self.levels[l].climbing;
            climbing.swap_remove(at);
            if let Some(&moved) = climbing.get(at) {
                self.climb_at[moved as usize] = at as u32;
            }
        }
    }

    #[inline]
    fn leaf(&self, i: usize) -> Node {
        if !self.line[i] {
            return Node {
                level: self.level_of[i],
                ..EMPTY
            };
        }
        Node {
            b: self.value[i],
            s: self.share(i),
            expires: NEVER,
            level: self.level_of[i],
            leader: i as u32,
        }
    }

    /// The node over `a` (left) and `b` (right): the lower level; within one level the higher
    /// line at the level's next round, the left (lower index) on a tie, and the round at which
    /// that may change.
    #[inline]
    fn combine(&self, a: Node, b: Node) -> Node {
        if a.level != b.level {
            if a.level == NONE {
                return b;
            }
            if b.level == NONE {
                return a;
            }
            let (la, lb) = (
                &self.levels[a.level as usize],
                &self.levels[b.level as usize],
            );
            let below =
                u128::from(la.num) * u128::from(lb.den) < u128::from(lb.num) * u128::from(la.den);
            return if below { a } else { b };
        }
        if a.level == NONE {
            return a;
        }
        let expires = a.expires.min(b.expires);
        if a.leader == NONE {
            return Node { expires, ..b };
        }
        if b.leader == NONE {
            return Node { expires, ..a };
        }
        let x = self.levels[a.level as usize].rounds + 1;
        let (va, vb) = (a.at(x), b.at(x));
        // `a` holds the lower indices: it wins ties, and overtakes on reaching `b`; `b` must
        // pass `a`.
        let (mut node, gap, gain, needs_pass) = if va >= vb {
            (a, va.abs_diff(vb), b.s - a.s, true)
        } else {
            (b, vb.abs_diff(va), a.s - b.s, false)
        };
        node.expires = expires;
        if gain > 0 {
            let gain = gain as u64;
            let rounds = if needs_pass {
                gap / gain + 1
            } else {
                gap.div_ceil(gain)
            };
            node.expires = expires.min(x.saturating_add(rounds));
        }
        node
    }

    /// Whether node `v` must be brought up to its level's next round.
    #[inline]
    fn expired(&self, v: usize) -> bool {
        let node = &self.tree[v];
        v < self.size
            && node.level != NONE
            && node.expires <= self.levels[node.level as usize].rounds + 1
    }

    /// Brings node `v`'s subtree up to its level's next round, revisiting only the nodes
    /// whose certificate ran out.
    fn refresh(&mut self, v: usize) {
        if !self.expired(v) {
            return;
        }
        for child in [2 * v, 2 * v + 1] {
            if self.expired(child) {
                self.refresh(child);
            }
        }
        self.tree[v] = self.combine(self.tree[2 * v], self.tree[2 * v + 1]);
    }

    /// Replays leaf `i` up to the root.
    fn update(&mut self, i: usize) {
        let mut v = self.size + i;
        let mut node = self.leaf(i);
        self.tree[v] = node;
        while v > 1 {
            // The sibling may hold a certificate that ran out at this round; the child on the
            // path was just made.
            let sibling = v ^ 1;
            if self.expired(sibling) {
                self.refresh(sibling);
            }
            let other = self.tree[sibling];
            node = if v & 1 == 0 {
                self.combine(node, other)
            } else {
                self.combine(other, node)
            };
            v /= 2;
            self.tree[v] = node;
        }
    }

    /// Looks at backend `i` again: files it under its level now, if that changed.
    fn resync(&mut self, i: usize, backends: &Backends<'_>) {
        let id = BackendId(i as u32);
        let fraction = self.fraction(id, backends);
        let old = self.level_of[i];
        let same = match fraction {
            None => old == NONE,
            Some((num, den)) => {
                old != NONE && {
                    let l = &self.levels[old as usize];
                    l.num == num && l.den == den
                }
            }
        };
        if !same {
            self.leave(i);
            if let Some(fraction) = fraction {
                let level = self.level_for(fraction);
                self.enter(i, level);
            }
            self.update(i);
        }
        self.schedule(id, backends);
    }

    /// Brings the index up to date with `backends` before a pick.
    fn sync(&mut self, backends: &Backends<'_>) {
        if self.value.len() != backends.len() {
            // Not rebuilt for this membership (a caller that skipped `rebuild`): start afresh.
            self.rebuild(backends, false);
        }
        let mut stale = std::mem::take(&mut self.scratch);
        stale.clear();
        match self.tracker.take(backends, &mut stale) {
            Stale::All => self.file_all(backends),
            Stale::Some => {
                for &i in &stale {
                    self.resync(i as usize, backends);
                }
            }
        }
        self.scratch = stale;
    }

    /// One pick: the smooth round among the usable backends (all of them for [`Score::Flat`],
    /// the tied least loaded otherwise), not counting `ctx.exclude`.
    pub(crate) fn pick(&mut self, ctx: &PickCtx<'_>, backends: &Backends<'_>) -> Option<BackendId> {
        self.sync(backends);
        let mut excluded = std::mem::take(&mut self.excluded);
        for &id in ctx.exclude {
            let i = id.index();
            if i < self.level_of.len() && self.level_of[i] != NONE {
                self.leave(i);
                self.update(i);
                excluded.push(i as u32);
            }
        }
        let picked = self.choose();
        for &i in &excluded {
            self.resync(i as usize, backends);
        }
        excluded.clear();
        self.excluded = excluded;
        picked
    }

    fn choose(&mut self) -> Option<BackendId> {
        self.refresh(1);
        let root = self.tree[1];
        if root.level == NONE {
            return None;
        }
        let l = root.level as usize;
        if self.score != Score::Flat && self.levels[l].members == 1 {
            // The least loaded alone: no round (nginx plays it only among tied peers).
            let only = if root.leader != NONE {
                root.leader
            } else {
                self.levels[l].climbing[0]
            };
            return Some(BackendId(only));
        }
        self.round(root).map(BackendId)
    }

    /// Plays one smooth round among the backends at `root`'s level; returns the winner (a
    /// level with members always has one: a line or a climber).
    fn round(&mut self, root: Node) -> Option<u32> {
        let l = root.level as usize;
        let x = self.levels[l].rounds + 1;
        let mut total = self.levels[l].line_share;
        let mut best: Option<(i64, u32)> = (root.leader != NONE).then(|| (root.at(x), root.leader));
        let mut settled = std::mem::take(&mut self.settled);
        for k in 0..self.levels[l].climbing.len() {
            let i = self.levels[l].climbing[k] as usize;
            let s = self.share(i);
            self.value[i] += s;
            total += s;
            if self.effective[i] < self.weight[i] {
                self.effective[i] += 1;
            }
            if self.effective[i] == self.weight[i] {
                settled.push(i as u32);
            }
            let v = self.value[i];
            if best.is_none_or(|(bv, b)| v > bv || (v == bv && (i as u32) < b)) {
                best = Some((v, i as u32));
            }
        }
        self.levels[l].rounds = x;
        let (_, winner) = best?;
        let w = winner as usize;
        self.value[w] = self.value[w].wrapping_sub(total);
        if self.line[w] {
            self.update(w);
        }
        for &i in &settled {
            // Back at full weight: from a climber to a line (its `current` is in `value`).
            let i = i as usize;
            let level = self.level_of[i];
            self.detach(i);
            self.level_of[i] = level;
            self.attach(i);
            self.update(i);
        }
        settled.clear();
        self.settled = settled;
        Some(winner)
    }

    /// nginx lowers a failed backend's effective weight by `weight / max_fails`.
    pub(crate) fn on_complete(&mut self, id: BackendId, c: &Completion) {
        let i = id.index();
        if c.outcome != Outcome::Failure || i >= self.effective.len() || self.max_fails[i] == 0 {
            return;
        }
        let lowered = (self.effective[i] - self.weight[i] / i64::from(self.max_fails[i])).max(0);
        if lowered == self.effective[i] {
            return;
        }
        if self.level_of[i] == NONE {
            self.effective[i] = lowered;
            return;
        }
        self.detach(i);
        self.effective[i] = lowered;
        self.attach(i);
        self.update(i);
    }

    pub(crate) fn on_change(&mut self, id: BackendId) {
        self.tracker.mark(id.index());
    }
}
