//! The diff of two trees, reading only the subtrees that differ.
//!
//! libgit2's `diff_tree_to_tree` reads every tree of both sides (on a
//! repository of 100,000 files in 1,000 directories, 2,000 trees inflated
//! from the pack), where git skips a subtree whose id is the same on both
//! sides. [`diff_trees`] finds the differing paths that way first, then
//! asks libgit2 for the diff of those paths only: its tree iterator does
//! not descend into a directory that holds none of them, so the deltas are
//! libgit2's own (modes, type changes, options) at the cost of what
//! changed. Every diff of two trees in ralph goes through it.
//!
//! Pitfall: an empty pathspec means "everything" to libgit2, so two equal
//! trees get the diff of two empty ones.

use git2::{Diff, DiffOptions, ObjectType, Repository, Tree, TreeEntry};

/// `git diff OLD NEW` of two trees (`None`: the empty tree) with `opts`
/// (which must not carry a pathspec of its own).
pub(crate) fn diff_trees<'r>(
    git: &'r Repository,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
    opts: Option<&mut DiffOptions>,
) -> Result<Diff<'r>, git2::Error> {
    let mut paths = Vec::new();
    differing(git, old, new, &mut Vec::new(), &mut paths)?;
    let mut own = DiffOptions::new();
    let opts = opts.unwrap_or(&mut own);
    if paths.is_empty() {
        return git.diff_tree_to_tree(None, None, Some(opts));
    }
    opts.disable_pathspec_match(true);
    for path in paths {
        opts.pathspec(path);
    }
    git.diff_tree_to_tree(old, new, Some(opts))
}

/// The paths under `prefix` whose entries differ between `old` and `new`,
/// descending only into subtrees whose ids differ.
fn differing(
    git: &Repository,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
    prefix: &mut Vec<u8>,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), git2::Error> {
    let (old_id, new_id) = (old.map(Tree::id), new.map(Tree::id));
    if old_id == new_id {
        return Ok(());
    }
    // Both lists are sorted the same way (git's tree order); a merge of
    // the two by name pairs each entry with its counterpart.
    let mut pairs: std::collections::BTreeMap<Vec<u8>, [Option<TreeEntry<'_>>; 2]> =
        std::collections::BTreeMap::new();
    for (side, tree) in [old, new].into_iter().enumerate() {
        for entry in tree.into_iter().flat_map(Tree::iter) {
            let name = entry.name_bytes().to_vec();
            pairs.entry(name).or_default()[side] = Some(entry);
        }
    }
    for (name, [o, n]) in pairs {
        if let (Some(o), Some(n)) = (&o, &n)
            && o.id() == n.id()
            && o.filemode() == n.filemode()
        {
            continue;
        }
        let len = prefix.len();
        prefix.extend_from_slice(&name);
        let subtree = |e: &Option<TreeEntry<'_>>| -> Result<Option<Tree<'_>>, git2::Error> {
            match e {
                Some(e) if e.kind() == Some(ObjectType::Tree) => git.find_tree(e.id()).map(Some),
                _ => Ok(None),
            }
        };
        let is_file = |e: &Option<TreeEntry<'_>>| {
            e.as_ref()
                .is_some_and(|e| e.kind() != Some(ObjectType::Tree))
        };
        if is_file(&o) || is_file(&n) {
            out.push(prefix.clone());
        }
        let (old_sub, new_sub) = (subtree(&o)?, subtree(&n)?);
        if old_sub.is_some() || new_sub.is_some() {
            prefix.push(b'/');
            differing(git, old_sub.as_ref(), new_sub.as_ref(), prefix, out)?;
        }
        prefix.truncate(len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::repository::tests::{commit_all, init_repo, write};

    /// Every delta as (status, old path, new path), in order.
    fn deltas(diff: &Diff<'_>) -> Vec<(git2::Delta, String, String)> {
        let path = |f: git2::DiffFile<'_>| {
            String::from_utf8_lossy(f.path_bytes().unwrap_or_default()).into_owned()
        };
        diff.deltas()
            .map(|d| (d.status(), path(d.old_file()), path(d.new_file())))
            .collect()
    }

    #[test]
    fn the_diff_is_libgit2s_own_for_every_kind_of_change() {
        let (dir, git) = init_repo();
        let root = dir.path();
        for (path, text) in [
            ("same/deep/x.txt", "x"),
            ("same/y.txt", "y"),
            ("mod/deep/z.txt", "z"),
            ("gone/g.txt", "g"),
            ("becomes_dir", "file"),
            ("exec.sh", "#!/bin/sh\n"),
        ] {
            write(root, path, text);
        }
        let before = git
            .find_commit(commit_all(&git, "before"))
            .unwrap()
            .tree()
            .unwrap();
        write(root, "mod/deep/z.txt", "z changed");
        write(root, "new/n.txt", "n");
        std::fs::remove_dir_all(root.join("gone")).unwrap();
        std::fs::remove_file(root.join("becomes_dir")).unwrap();
        write(root, "becomes_dir/inner.txt", "inner");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("exec.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let after = git
            .find_commit(commit_all(&git, "after"))
            .unwrap()
            .tree()
            .unwrap();
        for typechange in [false, true] {
            let opts = || {
                let mut o = DiffOptions::new();
                o.include_typechange(typechange);
                o
            };
            let full = git
                .diff_tree_to_tree(Some(&before), Some(&after), Some(&mut opts()))
                .unwrap();
            let ours = diff_trees(&git, Some(&before), Some(&after), Some(&mut opts())).unwrap();
            assert_eq!(deltas(&ours), deltas(&full), "typechange {typechange}");
            assert!(deltas(&ours).len() >= 5, "{:?}", deltas(&ours));
        }
        // Against nothing, both ways.
        for (a, b) in [(None, Some(&before)), (Some(&before), None)] {
            let full = git.diff_tree_to_tree(a, b, None).unwrap();
            assert_eq!(
                deltas(&diff_trees(&git, a, b, None).unwrap()),
                deltas(&full)
            );
        }
        // Equal trees: no delta (an empty pathspec would mean everything).
        assert!(deltas(&diff_trees(&git, Some(&after), Some(&after), None).unwrap()).is_empty());
        let empty = git
            .find_tree(git.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        assert!(deltas(&diff_trees(&git, Some(&empty), None, None).unwrap()).is_empty());
    }

    #[test]
    fn only_the_subtrees_that_differ_are_named() {
        let (dir, git) = init_repo();
        let root = dir.path();
        for d in 0..20 {
            write(root, &format!("d{d}/f.txt"), "same");
        }
        let before = git
            .find_commit(commit_all(&git, "before"))
            .unwrap()
            .tree()
            .unwrap();
        write(root, "d7/f.txt", "changed");
        let after = git
            .find_commit(commit_all(&git, "after"))
            .unwrap()
            .tree()
            .unwrap();
        let mut paths = Vec::new();
        differing(
            &git,
            Some(&before),
            Some(&after),
            &mut Vec::new(),
            &mut paths,
        )
        .unwrap();
        assert_eq!(paths, [b"d7/f.txt".to_vec()]);
    }
}
