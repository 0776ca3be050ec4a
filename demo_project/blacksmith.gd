# Bram the blacksmith: a GeistNPC that can hand the player an item from his stock through the
# `give_item` action (GeistNPC.actions). The model decides in its reply whether to give something;
# the call arrives as the `acted` signal with typed arguments, and the game does the rest.
extends GeistNPC

signal item_given(item: String, count: int)

## The action list adds about 150 tokens to the persona: a cap that leaves room for a few turns.
const MIN_CAP := 512
const STOCK: Array[String] = ["sword", "shield", "helmet", "horseshoe"]
const GIVE_ITEM: Dictionary = {
	"name": "give_item",
	"description": "Hand the player an item from your stock when they ask for one.",
	"parameters": {
		"type": "object",
		"properties": {
			"item": {"type": "string", "enum": STOCK},
			"count": {"type": "integer", "minimum": 1, "maximum": 2},
		},
		"required": ["item", "count"],
		"additionalProperties": false,
	},
}

## What the player received from Bram: item -> count.
var given: Dictionary = {}


func _init() -> void:
	actions = [GIVE_ITEM]
	acted.connect(_on_acted)


func _on_acted(action: StringName, args: Dictionary) -> void:
	if action != &"give_item":
		return
	var item: String = args["item"]
	var count: int = args["count"]
	given[item] = int(given.get(item, 0)) + count
	item_given.emit(item, count)
