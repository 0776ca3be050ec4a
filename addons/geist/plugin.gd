@tool
extends EditorPlugin
## Registers the geist Project Settings, the Geist dock and the export plugin that stores every
## .gguf model the game names (export_plugin.gd). The .gguf loader itself is registered by the
## extension (GeistModelLoader), so it works in exported games too.

const SETTINGS := [
	["geist/runtime/threads", TYPE_INT, 1, PROPERTY_HINT_RANGE, "1,64,1"],
	["geist/runtime/backend", TYPE_STRING, "auto", PROPERTY_HINT_ENUM_SUGGESTION, "auto,cpu_x86,cpu_scalar,vulkan"],
	["geist/runtime/device", TYPE_STRING, "auto", PROPERTY_HINT_NONE, ""],
	# vulkan: decode steps on float activations, their attention in the device's own order
	# (faster; not cpu_scalar's bits: docs/VULKAN.md "Fast products")
	["geist/runtime/device_fast", TYPE_BOOL, false, PROPERTY_HINT_NONE, ""],
	# scheduling of the runtime: at most budget_ms of worker time per period_ms (0 = no budget),
	# prompt tokens per step, rows per batched step
	["geist/runtime/budget_ms", TYPE_FLOAT, 0.0, PROPERTY_HINT_RANGE, "0,1000,0.5"],
	["geist/runtime/period_ms", TYPE_FLOAT, 16.0, PROPERTY_HINT_RANGE, "1,1000,0.5"],
	["geist/runtime/prefill_chunk", TYPE_INT, 64, PROPERTY_HINT_RANGE, "1,4096,1"],
	["geist/runtime/max_batch", TYPE_INT, 64, PROPERTY_HINT_RANGE, "1,4096,1"],
]

const Dock := preload("res://addons/geist/dock.gd")

var dock: Dock
var exporter: EditorExportPlugin


func _enter_tree() -> void:
	for s in SETTINGS:
		if not ProjectSettings.has_setting(s[0]):
			ProjectSettings.set_setting(s[0], s[2])
		ProjectSettings.set_initial_value(s[0], s[2])
		ProjectSettings.add_property_info({"name": s[0], "type": s[1], "hint": s[3], "hint_string": s[4]})
	dock = Dock.new()
	dock.name = "Geist"
	# a column of its own beside the Inspector, not a fourth tab behind Inspector/Signals/Groups
	add_control_to_dock(DOCK_SLOT_RIGHT_UR, dock)
	scene_changed.connect(_on_scene_changed)
	exporter = preload("res://addons/geist/export_plugin.gd").new()
	add_export_plugin(exporter)


func _on_scene_changed(_root: Node) -> void:
	if dock:
		dock.refresh_npcs()


func _exit_tree() -> void:
	if scene_changed.is_connected(_on_scene_changed):
		scene_changed.disconnect(_on_scene_changed)
	if exporter:
		remove_export_plugin(exporter)
		exporter = null
	if dock:
		remove_control_from_docks(dock)
		dock.queue_free()
		dock = null
