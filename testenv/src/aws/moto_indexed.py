# Loaded by testenv before moto's server starts (`python -c`, see moto.rs).
#
# moto keeps each hosted zone's change journal as a list and scans it for
# every change it applies: `value in rr_changes` for each CREATE and
# `has_insert_or_update` for each DELETE. A 1,000-change batch into a zone
# of 10,000 records took moto ~25 s on two cores (Route53: about a second),
# so large zones (the scale bench, service-dns's batch tests) ran into
# client timeouts measuring moto instead of the operator. This keeps the
# same journal with two indexes beside it, answering the same questions
# in constant time.
#
# One fix besides: moto refuses a CREATE identical to one in the journal
# when `get_record_sets(type, name)` — every record set sorted at or after
# that name and type, not only those at it — is not empty. A record set
# created, deleted and created again (A -> CNAME -> A, an ALIAS -> CNAME ->
# ALIAS) was then refused as "already exists" whenever anything sorted
# after it, where Route53 takes it. A DELETE here takes the identical
# CREATE out of the membership index, so the re-creation is judged on the
# zone as it is.
#
# And one more: moto deletes a record set with a SetIdentifier (a weighted
# or failover set) by its identifier alone, so deleting `www A` of set
# `cluster-a` took every set called `cluster-a` in the zone — its ownership
# TXT and every other name's — where Route53 deletes that one set (name,
# type and identifier). The change being applied is tracked here so that
# the delete can tell which set it means. Nothing else of moto changes.

import json
import threading

from moto.route53 import models as _models

_Journal = _models.ChangeList


def _key(item):
    return json.dumps(item, sort_keys=True, default=str)


class IndexedChangeList(_Journal):
    """moto's ChangeList, with the membership and the CREATE/UPSERT
    lookups indexed (by the change's canonical text, by name and type)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._keys = {}
        self._writes = {}
        for item in list(self):
            self._index(item)

    def _index(self, item):
        key = _key(item)
        self._keys[key] = self._keys.get(key, 0) + 1
        if item.get("Action") in ("CREATE", "UPSERT"):
            rr_set = item["ResourceRecordSet"]
            self._writes.setdefault((rr_set["Name"], rr_set["Type"]), []).append(rr_set)

    def append(self, item):
        super().append(item)  # strips the name's trailing dot, as moto does
        self._index(item)
        if item.get("Action") == "DELETE":
            created = _key({"Action": "CREATE", "ResourceRecordSet": item["ResourceRecordSet"]})
            if self._keys.get(created, 0) > 0:
                self._keys[created] -= 1

    def __contains__(self, item):
        item["ResourceRecordSet"]["Name"] = item["ResourceRecordSet"]["Name"].strip(".")
        return self._keys.get(_key(item), 0) > 0

    def has_insert_or_update(self, new_rr_set):
        name = new_rr_set["Name"].strip(".")
        for rr_set in self._writes.get((name, new_rr_set["Type"]), ()):
            if "TTL" in rr_set:
                if rr_set["TTL"] == new_rr_set.get("TTL") and rr_set["ResourceRecords"] == new_rr_set.get(
                    "ResourceRecords"
                ):
                    return True
            else:
                return True
        return False


# FakeZone makes its journal from the module's name at creation (resets included).
_models.ChangeList = IndexedChangeList

_applying = threading.local()


class _TrackedChanges(list):
    """A change list that says which change moto is applying."""

    def __iter__(self):
        for item in list.__iter__(self):
            _applying.change = item
            yield item
        _applying.change = None


_change_record_sets = _models.Route53Backend.change_resource_record_sets


def _change_resource_record_sets(self, zoneid, change_list):
    try:
        return _change_record_sets(self, zoneid, _TrackedChanges(change_list))
    finally:
        _applying.change = None


def _norm(name):
    return (name or "").rstrip(".").lower()


def _delete_rrset_by_id(self, set_identifier):
    change = getattr(_applying, "change", None)
    rr_set = (change or {}).get("ResourceRecordSet")
    if not rr_set:
        return _delete_by_id_alone(self, set_identifier)
    name, rtype = _norm(rr_set.get("Name")), rr_set.get("Type")
    self.rrsets = [
        r
        for r in self.rrsets
        if not (_norm(r.name) == name and r.type == rtype and r.set_identifier == set_identifier)
    ]


_delete_by_id_alone = _models.FakeZone.delete_rrset_by_id
_models.Route53Backend.change_resource_record_sets = _change_resource_record_sets
_models.FakeZone.delete_rrset_by_id = _delete_rrset_by_id
