# Prints the geist classes' API as ClassDB registered it (one JSON line after "API:").
# Run by tests/godot/test_godot.py::test_class_reference_covers_api.
extends SceneTree

const CLASSES := ["GeistModel", "GeistModelLoader", "GeistSession", "GeistNPC", "GeistReply",
	"GeistSampler", "GeistEngineSingleton"]


func _init() -> void:
	var out := {}
	for cls: String in CLASSES:
		var props := {}
		var accessors := {}
		for p in ClassDB.class_get_property_list(cls, true):
			if p.usage & PROPERTY_USAGE_CATEGORY or p.usage & PROPERTY_USAGE_GROUP:
				continue
			props[p.name] = {"type": type_name(p), "setter": ClassDB.class_get_property_setter(cls, p.name),
				"getter": ClassDB.class_get_property_getter(cls, p.name)}
			accessors[props[p.name].setter] = true
			accessors[props[p.name].getter] = true
		var methods := {}
		for m in ClassDB.class_get_method_list(cls, true):
			if not accessors.has(m.name) and not str(m.name).begins_with("_"):
				var args := []
				for a in m.args:
					args.append([a.name, type_name(a)])
				methods[m.name] = {"return": type_name(m.return), "args": args}
		var signals := []
		for s in ClassDB.class_get_signal_list(cls, true):
			signals.append(s.name)
		out[cls] = {"inherits": ClassDB.get_parent_class(cls), "methods": methods,
			"members": props, "signals": signals,
			"constants": ClassDB.class_get_integer_constant_list(cls, true)}
	print("API:", JSON.stringify(out))
	quit(0)


func type_name(info: Dictionary) -> String:
	if info.type == TYPE_OBJECT:
		return str(info.class_name)
	if info.type == TYPE_NIL:
		return "Variant" if info.usage & PROPERTY_USAGE_NIL_IS_VARIANT else "void"
	return type_string(info.type)
