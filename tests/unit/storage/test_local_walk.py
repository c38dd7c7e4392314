"""Local listing with symbolic links: each file once, folder links only on request, no loops."""

from __future__ import annotations

import logging
import os

import pytest

from tfbatch.storage import list_prefix


def keys(prefix, **kw) -> list[str]:
    return [r.key for r in list_prefix(str(prefix), **kw)]


@pytest.fixture
def tree(tmp_path):
    """in/ with real files, aliases inside the tree, a loop, and links to an outside folder."""
    inp, outside = tmp_path / "in", tmp_path / "outside"
    (inp / "a").mkdir(parents=True)
    (inp / "b").mkdir()
    outside.mkdir()
    (inp / "a" / "x.jpg").write_bytes(b"x")
    (inp / "b" / "y.jpg").write_bytes(b"y")
    (outside / "o.jpg").write_bytes(b"o")
    (tmp_path / "lone.jpg").write_bytes(b"l")
    os.symlink(inp / "a" / "x.jpg", inp / "b" / "alias-of-x.jpg")  # diamond: same file twice
    os.symlink(inp / "a", inp / "b" / "a-again")  # folder alias inside the tree
    os.symlink(inp, inp / "a" / "loop")  # loop back to the root
    os.symlink(outside, inp / "ext1")  # two links to one outside folder
    os.symlink(outside, inp / "ext2")
    os.symlink(tmp_path / "lone.jpg", inp / "l1.jpg")  # two links to one outside file
    os.symlink(tmp_path / "lone.jpg", inp / "l2.jpg")
    os.symlink(tmp_path / "missing", inp / "dangling.jpg")
    return inp


def test_default_lists_each_file_once_and_no_folder_links(tree, caplog):
    with caplog.at_level(logging.INFO, logger="tfbatch.storage.local_walk"):
        assert keys(tree) == ["a/x.jpg", "b/y.jpg", "l1.jpg"]
    text = caplog.text
    assert "b/alias-of-x.jpg: link to" in text and "listed under its own name" in text
    assert "ext1: link to folder" in text and "pass --follow-symlinks" in text
    assert "l2.jpg: link to" in text and "already listed" in text
    assert "dangling.jpg: symbolic link to nothing readable" in text


def test_follow_symlinks_walks_an_outside_folder_once_and_never_loops(tree, caplog):
    with caplog.at_level(logging.INFO, logger="tfbatch.storage.local_walk"):
        got = keys(tree, follow_symlinks=True)
    assert got == ["a/x.jpg", "b/y.jpg", "ext1/o.jpg", "l1.jpg"]
    assert "ext2: link to" in caplog.text and "already listed" in caplog.text


def test_loop_to_an_ancestor_outside_the_tree_is_refused(tmp_path, caplog):
    inp = tmp_path / "deep" / "in"
    inp.mkdir(parents=True)
    (inp / "f").write_bytes(b"f")
    os.symlink(tmp_path, inp / "up")
    with caplog.at_level(logging.WARNING, logger="tfbatch.storage.local_walk"):
        assert keys(inp, follow_symlinks=True) == ["f"]
    assert "which contains it (a loop)" in caplog.text


def test_root_given_as_a_link_is_followed(tree, tmp_path):
    os.symlink(tree, tmp_path / "root-link")
    assert keys(tmp_path / "root-link") == ["a/x.jpg", "b/y.jpg", "l1.jpg"]


def test_name_prefix_tree_membership(tmp_path):
    (tmp_path / "img1.jpg").write_bytes(b"1")
    (tmp_path / "other.jpg").write_bytes(b"2")
    os.symlink(tmp_path / "other.jpg", tmp_path / "img2.jpg")  # target outside the name prefix: listed
    os.symlink(tmp_path / "img1.jpg", tmp_path / "img3.jpg")  # target listed itself: not again
    assert keys(tmp_path / "img") == ["img1.jpg", "img2.jpg"]
