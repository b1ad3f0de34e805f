"""The backend registry: which backend a location gets, and its options as one mapping."""

from __future__ import annotations

import pytest

from datakit.errors import StoreError
from datakit.stores import BACKENDS, given_options, resolve_store
from datakit.stores.lmdb import LMDBSpec
from datakit.stores.mongo import MongoSpec


@pytest.mark.parametrize(("location", "options", "kind"), [
    ("some/path", {}, LMDBSpec),
    ("mongodb://h:1/db", {"collection": "c"}, MongoSpec),
    ("mongodb+srv://cluster.example.net/db", {"collection": "c"}, MongoSpec),
])
def test_the_first_matching_backend_of_the_table_makes_the_spec(location, options, kind):
    spec = resolve_store(location, options)
    assert type(spec) is kind
    assert spec.backend == next(backend.name for backend in BACKENDS if backend.matches(location))
    assert resolve_store(spec, {"collection": "ignored"}) is spec


@pytest.mark.parametrize("location", ["some/path", "mongodb://h:1/db"])
def test_an_option_no_backend_knows_is_a_type_error(location):
    with pytest.raises(TypeError, match="unknown store option 'colection'"):
        resolve_store(location, {"colection": "c"})


def test_mongodb_options_with_a_path_say_they_need_a_uri():
    with pytest.raises(StoreError, match="only to mongodb://"):
        resolve_store("some/path", {"database": "d"})
    assert isinstance(resolve_store("some/path", {"collection": None}), LMDBSpec)  # None: not given


def test_given_options_leaves_out_what_was_not_given():
    assert given_options(collection="c", database=None) == {"collection": "c"}
    assert given_options(collection=None, database=None) == {}
