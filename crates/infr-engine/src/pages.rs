//! KV cache pages: fixed-size blocks of token slots handed out to sequences, with reference
//! counts so sequences can share a cached prefix.

/// A pool of `n_pages` pages.
#[derive(Debug)]
pub struct PagePool {
    refs: Vec<u32>,
    free: Vec<u32>,
    page_size: u32,
}

impl PagePool {
    /// A pool with every page free.
    pub fn new(n_pages: u32, page_size: u32) -> Self {
        Self { refs: vec![0; n_pages as usize], free: (0..n_pages).rev().collect(), page_size }
    }

    /// Tokens per page.
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// Pages not in use.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// Total pages.
    pub fn n_pages(&self) -> usize {
        self.refs.len()
    }

    /// Take a free page.
    pub fn alloc(&mut self) -> Option<u32> {
        let p = self.free.pop()?;
        self.refs[p as usize] = 1;
        Some(p)
    }

    /// Add a reference to a page in use (sharing a prefix).
    pub fn retain(&mut self, page: u32) {
        debug_assert!(self.refs[page as usize] > 0);
        self.refs[page as usize] += 1;
    }

    /// Drop a reference; the page is free again at zero.
    pub fn release(&mut self, page: u32) {
        let r = &mut self.refs[page as usize];
        debug_assert!(*r > 0);
        *r -= 1;
        if *r == 0 {
            self.free.push(page);
        }
    }

    /// How many sequences use a page.
    pub fn ref_count(&self, page: u32) -> u32 {
        self.refs[page as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_release_share() {
        let mut p = PagePool::new(2, 16);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        assert!(p.alloc().is_none());
        p.retain(a);
        p.release(a);
        assert_eq!(p.free_pages(), 0);
        p.release(a);
        p.release(b);
        assert_eq!(p.free_pages(), 2);
    }
}
