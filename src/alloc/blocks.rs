//! The free-block allocator of one buffer type inside the graph allocator (stock's
//! `ggml_dyn_tallocr`): it hands out offsets in a virtual buffer that may be split into up
//! to [`MAX_CHUNKS`] backend buffers ("chunks"), remembers how far each chunk was used
//! (`max_size`), and merges freed ranges back. Nothing here touches memory: the graph
//! allocator turns the offsets into addresses once the chunks are allocated.
//!
//! The choices are stock's, decision for decision, because the `stock` layout must give
//! stock's offsets byte for byte: best fit among a chunk's inner free blocks (the last chunk
//! with any fitting block wins, ties going to the later block), else the chunk whose trailing
//! block grows the least (or wastes the least), else a new chunk. One difference: stock
//! aborts at 256 free blocks per chunk ("out of free blocks"); this keeps any number.

/// Chunks a virtual buffer may have (stock's `GGML_VBUFFER_MAX_CHUNKS`).
pub const MAX_CHUNKS: usize = 16;

/// A place in a virtual buffer: the chunk (backend buffer) and the byte offset inside it
/// (stock's `struct buffer_address`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Addr {
    /// Index of the chunk, `0..MAX_CHUNKS`.
    pub chunk: u32,
    /// Bytes from the chunk's base.
    pub offset: usize,
}

/// A free byte range `[offset, offset + size)` of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    offset: usize,
    size: usize,
}

/// One chunk's free ranges, sorted by offset, and the high-water mark of what was handed out.
#[derive(Clone, Debug)]
struct Chunk {
    free: Vec<Block>,
    max_size: usize,
}

/// Why [`Blocks::alloc`] could not place a tensor: every chunk is in use and none has room.
/// Cannot happen in practice (the last chunk is made virtually endless), but stock reports it,
/// and so do we, with its figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfChunks {
    /// The aligned size asked for, in bytes.
    pub size: usize,
    /// The largest free block seen, in bytes.
    pub max_avail: usize,
}

/// The allocator of one buffer type (stock's `ggml_dyn_tallocr`). Sizes and offsets in bytes.
#[derive(Clone, Debug)]
pub struct Blocks {
    alignment: usize,
    max_chunk_size: usize,
    chunks: Vec<Chunk>,
}

/// `size` rounded up to a multiple of `alignment` (a power of two), as stock's
/// `aligned_offset(NULL, size, alignment)`.
#[inline]
pub fn align_up(size: usize, alignment: usize) -> usize {
    debug_assert!(alignment.is_power_of_two());
    size.wrapping_add((alignment - size % alignment) % alignment)
}

impl Blocks {
    /// An empty allocator for a buffer type of `alignment` bytes (a power of two) whose
    /// buffers may hold `max_buffer_size` bytes (stock `ggml_dyn_tallocr_new`; the size is
    /// clamped to `usize::MAX / 2` so that sums cannot overflow).
    pub fn new(alignment: usize, max_buffer_size: usize) -> Self {
        Blocks {
            alignment,
            max_chunk_size: max_buffer_size.min(usize::MAX / 2),
            chunks: Vec::new(),
        }
    }

    /// The buffer type's alignment, in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Forgets every chunk (stock `ggml_dyn_tallocr_reset`).
    pub fn reset(&mut self) {
        self.chunks.clear();
    }

    /// Chunks in use.
    pub fn n_chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Bytes chunk `chunk` must have: the end of the furthest range handed out from it (0 for a
    /// chunk that does not exist; stock `ggml_dyn_tallocr_max_size`).
    pub fn max_size(&self, chunk: usize) -> usize {
        self.chunks.get(chunk).map_or(0, |c| c.max_size)
    }

    /// Sets the bytes chunk `chunk` must have, for a layout that moved its blocks
    /// ([`super::pack`]); the free ranges are left as they are (the walk that used them is over).
    pub fn set_max_size(&mut self, chunk: usize, size: usize) {
        self.chunks[chunk].max_size = size;
    }

    /// Opens a chunk able to hold `min_size` bytes; `None` when all [`MAX_CHUNKS`] are open.
    /// A chunk holds `max_chunk_size` bytes, more when one tensor needs more, and the last
    /// possible chunk is made virtually endless: the backend then allocates it or reports the
    /// failure by name.
    fn new_chunk(&mut self, min_size: usize) -> Option<usize> {
        if self.chunks.len() >= MAX_CHUNKS {
            return None;
        }
        let size = if self.chunks.len() == MAX_CHUNKS - 1 {
            usize::MAX / 2
        } else {
            min_size.max(self.max_chunk_size)
        };
        self.chunks.push(Chunk {
            free: vec![Block { offset: 0, size }],
            max_size: 0,
        });
        Some(self.chunks.len() - 1)
    }

    /// Hands out `size` bytes (rounded up to the alignment) and returns where (stock
    /// `ggml_dyn_tallocr_alloc`).
    pub fn alloc(&mut self, size: usize) -> Result<Addr, OutOfChunks> {
        let size = align_up(size, self.alignment);
        let mut best: Option<(usize, usize)> = None;
        let mut max_avail = 0usize;

        // Best fit among the inner blocks (all but each chunk's last); the best size is
        // reset for every chunk, so a later chunk with a fitting block wins.
        for (c, chunk) in self.chunks.iter().enumerate() {
            let mut best_size = usize::MAX;
            let inner = chunk.free.len().saturating_sub(1);
            for (i, b) in chunk.free[..inner].iter().enumerate() {
                max_avail = max_avail.max(b.size);
                if b.size >= size && b.size <= best_size {
                    best = Some((c, i));
                    best_size = b.size;
                }
            }
        }

        if best.is_none() {
            // A chunk's last block: prefer the one that needs the least growth of the chunk,
            // then, among those that need none, the one that leaves the least unused.
            let mut best_reuse = i64::MIN;
            for (c, chunk) in self.chunks.iter().enumerate() {
                let Some(last) = chunk.free.last() else {
                    continue;
                };
                max_avail = max_avail.max(last.size);
                // Computed in unsigned arithmetic and read as signed, as stock does.
                let reuse = chunk.max_size.wrapping_sub(last.offset).wrapping_sub(size) as i64;
                let better_reuse = best_reuse < 0 && reuse > best_reuse;
                let better_fit = reuse >= 0 && reuse < best_reuse;
                if last.size >= size && (better_reuse || better_fit) {
                    best = Some((c, chunk.free.len() - 1));
                    best_reuse = reuse;
                }
            }
        }

        let (c, i) = match best {
            Some(found) => found,
            None => match self.new_chunk(size) {
                Some(c) => (c, 0),
                None => return Err(OutOfChunks { size, max_avail }),
            },
        };
        let chunk = &mut self.chunks[c];
        let block = &mut chunk.free[i];
        let addr = Addr {
            chunk: c as u32,
            offset: block.offset,
        };
        block.offset += size;
        block.size -= size;
        if block.size == 0 {
            chunk.free.remove(i);
        }
        chunk.max_size = chunk.max_size.max(addr.offset + size);
        Ok(addr)
    }

    /// Gives `size` bytes (rounded up to the alignment) at `addr` back, merging with the free
    /// blocks they touch (stock `ggml_dyn_tallocr_free_bytes`).
    pub fn free(&mut self, addr: Addr, size: usize) {
        let size = align_up(size, self.alignment);
        let free = &mut self.chunks[addr.chunk as usize].free;
        for i in 0..free.len() {
            let b = free[i];
            if b.offset + b.size == addr.offset {
                // The range ends this block: grow it, and join the next one if now adjacent.
                free[i].size += size;
                if i + 1 < free.len() && free[i].offset + free[i].size == free[i + 1].offset {
                    free[i].size += free[i + 1].size;
                    free.remove(i + 1);
                }
                return;
            }
            if addr.offset + size == b.offset {
                // The range starts this block: move its start, and join the previous one.
                free[i].offset = addr.offset;
                free[i].size += size;
                if i > 0 && free[i - 1].offset + free[i - 1].size == free[i].offset {
                    free[i - 1].size += free[i].size;
                    free.remove(i);
                }
                return;
            }
        }
        let at = free.partition_point(|b| b.offset < addr.offset);
        free.insert(
            at,
            Block {
                offset: addr.offset,
                size,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(chunk: u32, offset: usize) -> Addr {
        Addr { chunk, offset }
    }

    #[test]
    fn sizes_are_aligned_and_max_size_is_the_high_water_mark() {
        let mut b = Blocks::new(32, 1 << 20);
        assert_eq!(b.alloc(10), Ok(a(0, 0)));
        assert_eq!(b.alloc(33), Ok(a(0, 32)));
        assert_eq!(b.max_size(0), 96);
        assert_eq!(b.max_size(1), 0);
        b.free(a(0, 0), 10);
        // The freed inner block is the best fit for a small tensor.
        assert_eq!(b.alloc(20), Ok(a(0, 0)));
        assert_eq!(b.max_size(0), 96);
    }

    #[test]
    fn freed_neighbours_merge_back_into_one_block() {
        let mut b = Blocks::new(1, 1 << 20);
        let x = b.alloc(100).unwrap();
        let y = b.alloc(100).unwrap();
        let z = b.alloc(100).unwrap();
        b.free(x, 100);
        b.free(z, 100); // joins the trailing block
        b.free(y, 100); // joins both sides: everything is one block again
        assert_eq!(
            b.chunks[0].free,
            vec![Block {
                offset: 0,
                size: 1 << 20
            }]
        );
    }

    #[test]
    fn best_fit_prefers_the_smallest_inner_block_and_the_later_of_equals() {
        let mut b = Blocks::new(1, 1000);
        let parts: Vec<Addr> = [50, 10, 30, 10, 30, 10]
            .iter()
            .map(|&s| b.alloc(s).unwrap())
            .collect();
        b.free(parts[0], 50); // [0, 50)
        b.free(parts[2], 30); // [60, 90)
        b.free(parts[4], 30); // [100, 130)
        assert_eq!(b.alloc(25), Ok(a(0, 100)));
        assert_eq!(b.alloc(40), Ok(a(0, 0)));
    }

    #[test]
    fn a_tensor_larger_than_the_chunk_size_opens_a_chunk_of_its_own() {
        let mut b = Blocks::new(8, 64);
        assert_eq!(b.alloc(40), Ok(a(0, 0)));
        assert_eq!(b.alloc(40), Ok(a(1, 0)));
        assert_eq!(b.alloc(100), Ok(a(2, 0)));
        assert_eq!((b.max_size(0), b.max_size(1), b.max_size(2)), (40, 40, 104));
        // Chunks 0 and 1 would both grow by 24 bytes: the first wins.
        assert_eq!(b.alloc(24), Ok(a(0, 40)));
    }

    #[test]
    fn the_last_chunk_is_endless_and_then_there_are_no_more() {
        let mut b = Blocks::new(1, 10);
        for c in 0..MAX_CHUNKS - 1 {
            assert_eq!(b.alloc(10), Ok(a(c as u32, 0)));
        }
        assert_eq!(b.alloc(1 << 40), Ok(a(15, 0)));
        assert_eq!(b.alloc(1 << 40), Ok(a(15, 1 << 40)));
        let err = b.alloc(usize::MAX / 2).unwrap_err();
        assert_eq!(err.size, usize::MAX / 2);
        assert!(err.max_avail > 0);
    }
}
