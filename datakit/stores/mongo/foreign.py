"""MongoDB collections that datakit did not write: the pickle recipe's layout, told from its documents.

The recipe keeps one document per image, ``{img_name, bson_img}``, and its
order and labels in a JSON index file beside it. A collection whose first
documents have both fields is that layout: ``MongoDataset`` and ``datakit
inspect`` then name it and give the command that imports it
(:mod:`datakit.conversion.sources.foreign.recipe_mongo`), instead of calling
it an unfinished conversion, whose advice (``--overwrite``) would destroy the
images.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from datakit.stores.mongo.connection import MongoConnection

__all__ = ["RECIPE_FIELDS", "SAMPLE_NAMES", "RecipeCollection", "recipe_collection"]

RECIPE_FIELDS = ("img_name", "bson_img")
"""The fields of the recipe's documents."""
SAMPLE_NAMES = 5
"""Image names shown by ``datakit inspect``."""


@dataclass(frozen=True)
class RecipeCollection:
    """A collection in the recipe's layout.

    Attributes:
        records: its documents.
        sample_keys: the first few ``img_name``s.
        command: the ``datakit convert`` command that imports it (``NEW`` stands for the new store).
        detail: what the documents are.
    """

    records: int
    sample_keys: list[str] = field(default_factory=list)
    command: str = ""
    detail: str = "{img_name, bson_img} documents; order and labels come from the recipe's JSON index"

    def describe(self, where: str) -> str:
        """One line: the layout, the count and the command."""
        return (f"{where} is a pickle-recipe MongoDB collection ({self.detail}; {self.records} records), "
                f"not a datakit store; import it with `{self.command}`")


def recipe_collection(connection: MongoConnection, server: str, collection: str) -> RecipeCollection | None:
    """The recipe's collection ``collection`` of ``connection``'s database, or ``None`` when its first
    document is not ``{img_name, bson_img}``.

    Args:
        connection: a client to the database.
        server: the server as commands name it (without its password).
        collection: the collection's name.
    """
    samples = connection.database()[collection]
    documents = connection.call(lambda: list(samples.find({}, {"img_name": 1, "bson_img": 1})
                                             .limit(SAMPLE_NAMES)))
    if not documents or not all(name in documents[0] for name in RECIPE_FIELDS):
        return None
    total = connection.call(lambda: samples.count_documents({}))
    command = f"datakit convert {server} NEW --source-collection {collection} --index INDEX.json"
    return RecipeCollection(int(total), [str(document.get("img_name")) for document in documents], command)
