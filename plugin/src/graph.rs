//! OrtGraph -> Bolt IR. The OrtGraph is read through ORT's graph API into an ONNX ModelProto
//! (nodes with their op types, domains and attributes, value infos with static and symbolic
//! dims, constant initializers with their data, opsets), which Bolt's importer turns into a
//! typed, shape-inferred [`Graph`]: the same path a .onnx file takes.

use crate::api::{api, check, cstr, Res};
use bolt::import::proto;
use bolt::ir::{DType, Graph, Tensor, TensorData};
use ort_sys::{
    c_char, ONNXTensorElementDataType, ONNXType, OrtGraph, OrtNode, OrtOpAttr, OrtOpAttrType,
    OrtTensorTypeAndShapeInfo, OrtValue, OrtValueInfo,
};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;

/// A graph read out of ORT, with the ORT node behind each Bolt node name.
pub struct Imported {
    pub graph: Graph,
    pub nodes: HashMap<String, *const OrtNode>,
}

/// Reads `g` into Bolt IR. Types ORT inferred for intermediate values seed Bolt's inference;
/// when they disagree with it, the graph is imported again from the inputs' types alone.
///
/// # Safety
/// `g` is a live OrtGraph for the duration of the call.
///
/// `hints`: types Bolt inferred for values of the whole model (kept from GetCapability). A
/// fused node's subgraph may reach Compile with inputs ORT could not shape; their shapes come
/// from the hints, so the subgraph plans as it did inside the whole model (e.g. a Softmax
/// before opset 13 is today's Softmax only at a known rank).
pub unsafe fn import(
    g: *const OrtGraph,
    outputs: Option<&[String]>,
    hints: Option<&HashMap<String, bolt::ir::TensorType>>,
) -> Res<Imported> {
    let (mut model, nodes) = read_model(g)?;
    if let (Some(hints), Some(graph)) = (hints, model.graph.as_mut()) {
        for v in graph.input.iter_mut().chain(graph.value_info.iter_mut()) {
            if let Some(t) = hints.get(v.name()) {
                give_shape(v, t);
            }
        }
        // Values ORT describes not at all: declared from the hints.
        let described: HashSet<String> =
            graph.input.iter().chain(&graph.value_info).chain(&graph.output).map(|v| v.name().to_string()).collect();
        let mut missing: Vec<proto::ValueInfoProto> = Vec::new();
        for name in graph.node.iter().flat_map(|n| &n.output).filter(|o| !o.is_empty() && !described.contains(*o)) {
            if let Some(t) = hints.get(name) {
                let mut v = proto::ValueInfoProto {
                    name: Some(name.clone()),
                    r#type: Some(proto::TypeProto {
                        value: Some(proto::type_proto::Value::TensorType(proto::type_proto::Tensor {
                            elem_type: Some(t.dtype.onnx_code()),
                            shape: None,
                        })),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                give_shape(&mut v, t);
                missing.push(v);
            }
        }
        graph.value_info.extend(missing);
    }
    if let (Some(outs), Some(graph)) = (outputs, model.graph.as_mut()) {
        // Compile: the fused node's outputs are the subgraph's outputs, in order.
        let known: HashMap<String, proto::ValueInfoProto> =
            graph.value_info.iter().chain(&graph.output).map(|v| (v.name().to_string(), v.clone())).collect();
        graph.output = outs
            .iter()
            .map(|o| {
                known.get(o).cloned().unwrap_or(proto::ValueInfoProto { name: Some(o.clone()), ..Default::default() })
            })
            .collect();
    }
    let first = load(&model);
    let imported = match first {
        Ok(m) => m,
        Err(e) => {
            crate::api::verbose(|| format!("import with ORT's value infos failed ({e}); retrying without them"));
            if let Some(graph) = model.graph.as_mut() {
                graph.value_info.clear();
            }
            load(&model)?
        }
    };
    // Nodes the importer wrote for one of ORT's (its fused ops as the ONNX ops they fused)
    // stand for that node: claiming any of them claims it, whole.
    let mut nodes = nodes;
    for (bolt_node, ort_node) in &imported.expanded_from {
        if let Some(&n) = nodes.get(ort_node) {
            nodes.insert(bolt_node.clone(), n);
        }
    }
    Ok(Imported { graph: imported.graph, nodes })
}

/// Declares `t`'s shape on `v` when `v` has the same element type and a shape that says
/// less (none, or unknown dims where `t` knows them).
fn give_shape(v: &mut proto::ValueInfoProto, t: &bolt::ir::TensorType) {
    use proto::tensor_shape_proto::{dimension::Value as D, Dimension};
    let Some(shape) = &t.shape else { return };
    let Some(proto::TypeProto { value: Some(proto::type_proto::Value::TensorType(tt)), .. }) = v.r#type.as_mut() else {
        return;
    };
    if tt.elem_type != Some(t.dtype.onnx_code()) {
        return;
    }
    if let Some(have) = &tt.shape {
        // Keep ORT's shape unless it is of the same rank and knows no dim `t` does not.
        let less = have.dim.len() == shape.rank()
            && have.dim.iter().zip(&shape.0).any(|(h, d)| h.value.is_none() && !matches!(d, bolt::ir::Dim::Unknown));
        if !less {
            return;
        }
    }
    let dim = shape
        .0
        .iter()
        .map(|d| Dimension {
            value: match d {
                bolt::ir::Dim::Known(n) => Some(D::DimValue(*n as i64)),
                bolt::ir::Dim::Sym(s) => Some(D::DimParam(s.clone())),
                bolt::ir::Dim::Unknown => None,
            },
            ..Default::default()
        })
        .collect();
    tt.shape = Some(proto::TensorShapeProto { dim });
}

fn load(model: &proto::ModelProto) -> Res<bolt::import::Model> {
    let bytes = model.encode_to_vec();
    bolt::import::load_bytes(&bytes, None).map_err(|e| e.to_string())
}

unsafe fn read_model(g: *const OrtGraph) -> Res<(proto::ModelProto, HashMap<String, *const OrtNode>)> {
    let ort = api().ort;
    let mut gp = proto::GraphProto { name: Some("bolt_ort".into()), ..Default::default() };

    // Opsets.
    let mut n = 0usize;
    check((ort.Graph_GetNumOperatorSets)(g, &mut n))?;
    let mut domains: Vec<*const c_char> = vec![std::ptr::null(); n];
    let mut versions = vec![0i64; n];
    if n > 0 {
        check((ort.Graph_GetOperatorSets)(g, domains.as_mut_ptr(), versions.as_mut_ptr(), n))?;
    }
    let opset_import: Vec<proto::OperatorSetIdProto> = domains
        .iter()
        .zip(&versions)
        .map(|(d, v)| proto::OperatorSetIdProto { domain: Some(cstr(*d)), version: Some(*v) })
        .collect();
    let mut ir_version = 0i64;
    check((ort.Graph_GetOnnxIRVersion)(g, &mut ir_version))?;

    // Constant initializers carry their data; overridable ones are inputs.
    let inits = list(g, ort.Graph_GetNumInitializers, ort.Graph_GetInitializers)?;
    let mut const_names: HashSet<String> = HashSet::new();
    let mut extra_inputs = Vec::new();
    for vi in inits {
        let name = value_name(vi)?;
        match constant_initializer(vi, &name)? {
            Some(t) => {
                const_names.insert(name);
                gp.initializer.push(t);
            }
            // Not constant, or of an element type Bolt does not hold: a graph input the
            // partitioner never claims.
            _ => extra_inputs.push(vi),
        }
    }
    for vi in list(g, ort.Graph_GetNumInputs, ort.Graph_GetInputs)?.into_iter().chain(extra_inputs) {
        let v = value_info(vi)?;
        if !const_names.contains(v.name()) && !gp.input.iter().any(|i| i.name() == v.name()) {
            gp.input.push(v);
        }
    }
    for vi in list(g, ort.Graph_GetNumOutputs, ort.Graph_GetOutputs)? {
        gp.output.push(value_info(vi)?);
    }

    // Nodes, with unique names (Bolt names nodes; ORT allows empty and repeated names).
    let mut count = 0usize;
    check((ort.Graph_GetNumNodes)(g, &mut count))?;
    let mut nodes: Vec<*const OrtNode> = vec![std::ptr::null(); count];
    if count > 0 {
        check((ort.Graph_GetNodes)(g, nodes.as_mut_ptr(), count))?;
    }
    let mut by_name = HashMap::new();
    let mut read_values: Vec<(String, *const OrtValueInfo)> = Vec::new();
    let mut seen_values: HashSet<String> = gp.input.iter().map(|v| v.name().to_string()).collect();
    seen_values.extend(const_names.iter().cloned());
    for (idx, &node) in nodes.iter().enumerate() {
        let mut p: *const c_char = std::ptr::null();
        check((ort.Node_GetOperatorType)(node, &mut p))?;
        let op_type = cstr(p);
        check((ort.Node_GetDomain)(node, &mut p))?;
        let domain = cstr(p);
        check((ort.Node_GetName)(node, &mut p))?;
        let mut name = cstr(p);
        if name.is_empty() || by_name.contains_key(&name) {
            name = format!("{op_type}_{idx}");
            while by_name.contains_key(&name) {
                name.push('_');
            }
        }
        let inputs = list(node, ort.Node_GetNumInputs, ort.Node_GetInputs)?;
        let outputs = list(node, ort.Node_GetNumOutputs, ort.Node_GetOutputs)?;
        let mut np = proto::NodeProto {
            name: Some(name.clone()),
            op_type: Some(op_type),
            domain: Some(domain),
            ..Default::default()
        };
        for vi in inputs {
            if vi.is_null() {
                np.input.push(String::new());
                continue;
            }
            let name = value_name(vi)?;
            read_values.push((name.clone(), vi));
            np.input.push(name);
        }
        for vi in outputs {
            if vi.is_null() {
                np.output.push(String::new());
                continue;
            }
            let v = value_info(vi)?;
            np.output.push(v.name().to_string());
            if v.r#type.is_some() && seen_values.insert(v.name().to_string()) {
                gp.value_info.push(v);
            }
        }
        let attrs = list(node, ort.Node_GetNumAttributes, ort.Node_GetAttributes)?;
        for a in attrs {
            if let Some(ap) = attribute(a)? {
                np.attribute.push(ap);
            }
        }
        gp.node.push(np);
        by_name.insert(name, node);
    }
    // A control-flow body (If / Loop / Scan branch, which ORT offers on its own) reads values
    // of the enclosing graph that are none of its inputs: declare them as inputs.
    let produced: HashSet<String> = gp.node.iter().flat_map(|n| n.output.iter().cloned()).collect();
    // Constant initializers of the enclosing graph (a body's weights) stay constants.
    for (name, vi) in read_values {
        if produced.contains(&name) || const_names.contains(&name) || gp.input.iter().any(|i| i.name() == name) {
            continue;
        }
        match constant_initializer(vi, &name)? {
            Some(t) => {
                const_names.insert(name);
                gp.initializer.push(t);
            }
            None => gp.input.push(value_info(vi)?),
        }
    }
    // Outputs are described by `output`; drop duplicates from value_info.
    let outs: HashSet<&str> = gp.output.iter().map(|o| o.name()).collect();
    let value_info = std::mem::take(&mut gp.value_info);
    gp.value_info = value_info.into_iter().filter(|v| !outs.contains(v.name())).collect();

    let model = proto::ModelProto {
        ir_version: Some(if ir_version > 0 { ir_version } else { 8 }),
        opset_import,
        graph: Some(gp),
        producer_name: Some("onnxruntime (bolt-plugin)".into()),
        ..Default::default()
    };
    Ok((model, by_name))
}

/// The tensor of a constant initializer (of this graph or an enclosing one), when Bolt holds
/// its element type.
unsafe fn constant_initializer(vi: *const OrtValueInfo, name: &str) -> Res<Option<proto::TensorProto>> {
    let ort = api().ort;
    let mut is_const = false;
    check((ort.ValueInfo_IsConstantInitializer)(vi, &mut is_const))?;
    let mut value: *const OrtValue = std::ptr::null();
    if is_const {
        check((ort.ValueInfo_GetInitializerValue)(vi, &mut value))?;
    }
    Ok((!value.is_null()).then(|| value_to_proto(value, name)).transpose()?.flatten())
}

type CountFn<T> = unsafe extern "system" fn(*const T, *mut usize) -> crate::abi::Status;
type ListFn<T, U> = unsafe extern "system" fn(*const T, *mut *const U, usize) -> crate::abi::Status;

unsafe fn list<T, U>(obj: *const T, count: CountFn<T>, get: ListFn<T, U>) -> Res<Vec<*const U>> {
    let mut n = 0usize;
    check(count(obj, &mut n))?;
    let mut v: Vec<*const U> = vec![std::ptr::null(); n];
    if n > 0 {
        check(get(obj, v.as_mut_ptr(), n))?;
    }
    Ok(v)
}

unsafe fn value_name(vi: *const OrtValueInfo) -> Res<String> {
    let mut p: *const c_char = std::ptr::null();
    check((api().ort.GetValueInfoName)(vi, &mut p))?;
    Ok(cstr(p))
}

/// A ValueInfoProto with the tensor type ORT knows (none for non-tensors).
unsafe fn value_info(vi: *const OrtValueInfo) -> Res<proto::ValueInfoProto> {
    let ort = api().ort;
    let name = value_name(vi)?;
    let mut ti: *const ort_sys::OrtTypeInfo = std::ptr::null();
    check((ort.GetValueInfoTypeInfo)(vi, &mut ti))?;
    let mut out = proto::ValueInfoProto { name: Some(name), ..Default::default() };
    if ti.is_null() {
        return Ok(out);
    }
    let mut onnx_type = ONNXType::ONNX_TYPE_UNKNOWN;
    check((ort.GetOnnxTypeFromTypeInfo)(ti, &mut onnx_type))?;
    if onnx_type != ONNXType::ONNX_TYPE_TENSOR {
        // Its kind (what Bolt does not compute with: the nodes reading it stay with ORT); a
        // value of no type at all would make the graph fail to import.
        use proto::type_proto::Value as V;
        let kind = match onnx_type {
            ONNXType::ONNX_TYPE_SEQUENCE => Some(V::SequenceType(Default::default())),
            ONNXType::ONNX_TYPE_MAP => Some(V::MapType(Default::default())),
            ONNXType::ONNX_TYPE_OPTIONAL => Some(V::OptionalType(Default::default())),
            ONNXType::ONNX_TYPE_SPARSETENSOR => Some(V::SparseTensorType(Default::default())),
            _ => None,
        };
        out.r#type = kind.map(|v| proto::TypeProto { value: Some(v), ..Default::default() });
        return Ok(out);
    }
    let mut info: *const OrtTensorTypeAndShapeInfo = std::ptr::null();
    check((ort.CastTypeInfoToTensorInfo)(ti, &mut info))?;
    if info.is_null() {
        return Ok(out);
    }
    let (elem, dims, syms) = shape_info(info)?;
    // Rank 0 is also what ORT reports for a value whose shape it could not infer (a shape
    // computation it did not fold): declare no shape then, so Bolt infers its own.
    if dims.is_empty() && api().has_shape_api && !(ort.TensorTypeAndShape_HasShape)(info) {
        out.r#type = Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(proto::type_proto::Tensor {
                elem_type: Some(elem),
                shape: None,
            })),
            ..Default::default()
        });
        return Ok(out);
    }
    use proto::tensor_shape_proto::{dimension::Value as D, Dimension};
    let shape = proto::TensorShapeProto {
        dim: dims
            .iter()
            .zip(&syms)
            .map(|(&d, s)| Dimension {
                value: if d >= 0 {
                    Some(D::DimValue(d))
                } else if !s.is_empty() {
                    Some(D::DimParam(s.clone()))
                } else {
                    None
                },
                ..Default::default()
            })
            .collect(),
    };
    out.r#type = Some(proto::TypeProto {
        value: Some(proto::type_proto::Value::TensorType(proto::type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(shape),
        })),
        ..Default::default()
    });
    Ok(out)
}

/// Element type code, dims (-1 unknown) and symbolic names ("" for none).
unsafe fn shape_info(info: *const OrtTensorTypeAndShapeInfo) -> Res<(i32, Vec<i64>, Vec<String>)> {
    let ort = api().ort;
    let mut elem = ONNXTensorElementDataType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    check((ort.GetTensorElementType)(info, &mut elem))?;
    let mut rank = 0usize;
    check((ort.GetDimensionsCount)(info, &mut rank))?;
    let mut dims = vec![0i64; rank];
    let mut syms: Vec<*const c_char> = vec![std::ptr::null(); rank];
    if rank > 0 {
        check((ort.GetDimensions)(info, dims.as_mut_ptr(), rank))?;
        check((ort.GetSymbolicDimensions)(info, syms.as_mut_ptr(), rank))?;
    }
    Ok((elem as i32, dims, syms.into_iter().map(|p| cstr(p)).collect()))
}

/// A tensor's data pointer and size in bytes (in whatever memory it lives).
///
/// # Safety
/// `v` is a live tensor OrtValue.
pub unsafe fn tensor_bytes(v: *const OrtValue) -> Res<(*mut c_void, usize)> {
    let ort = api().ort;
    let mut data: *const c_void = std::ptr::null();
    check((ort.GetTensorData)(v, &mut data))?;
    let mut n = 0usize;
    check((ort.GetTensorSizeInBytes)(v, &mut n))?;
    Ok((data as *mut c_void, n))
}

/// Element type and shape of a tensor value.
///
/// # Safety
/// `v` is a live tensor OrtValue.
pub unsafe fn tensor_meta(v: *const OrtValue) -> Res<(DType, Vec<usize>)> {
    let ort = api().ort;
    let mut info: *mut OrtTensorTypeAndShapeInfo = std::ptr::null_mut();
    check((ort.GetTensorTypeAndShape)(v, &mut info))?;
    let r = shape_info(info);
    (ort.ReleaseTensorTypeAndShapeInfo)(info);
    let (elem, dims, _) = r?;
    let dims = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("tensor has a negative dimension {d}")))
        .collect::<Res<Vec<_>>>()?;
    Ok((DType::from_onnx(elem), dims))
}

/// Element type, dims and little-endian bytes of a tensor.
type RawTensor = (DType, Vec<usize>, Vec<u8>);

/// Copies a tensor value out of ORT as raw little-endian bytes (None for element types Bolt
/// does not hold, e.g. strings).
unsafe fn value_bytes(v: *const OrtValue) -> Res<Option<RawTensor>> {
    let (dtype, dims) = tensor_meta(v)?;
    let Some(esize) = dtype.size_bytes() else { return Ok(None) };
    let count: usize = dims.iter().product();
    let mut data: *const c_void = std::ptr::null();
    check((api().ort.GetTensorData)(v, &mut data))?;
    let n = count * esize;
    if n > 0 && data.is_null() {
        return Err("tensor has no data".into());
    }
    let bytes = if n == 0 { Vec::new() } else { std::slice::from_raw_parts(data as *const u8, n).to_vec() };
    Ok(Some((dtype, dims, bytes)))
}

unsafe fn value_to_proto(v: *const OrtValue, name: &str) -> Res<Option<proto::TensorProto>> {
    Ok(value_bytes(v)?.map(|(dtype, dims, raw)| proto::TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: Some(dtype.onnx_code()),
        name: Some(name.to_string()),
        raw_data: Some(raw),
        ..Default::default()
    }))
}

/// A tensor value as a Bolt tensor (one copy).
///
/// # Safety
/// `v` is a live tensor OrtValue.
pub unsafe fn value_to_tensor(v: *const OrtValue, name: &str) -> Res<Tensor> {
    let (dtype, dims) = tensor_meta(v)?;
    let count: usize = dims.iter().product();
    let mut data: *const c_void = std::ptr::null();
    check((api().ort.GetTensorData)(v, &mut data))?;
    if count > 0 && data.is_null() {
        return Err(format!("input '{name}' has no data"));
    }
    copy_tensor(dtype, dims, data, name)
}

/// Copies a dense row-major buffer of `dims` elements of `dtype` into a Bolt tensor (the
/// host-framework boundary: ORT values and DLPack tensors both arrive this way).
///
/// # Safety
/// `data` points at `dims.iter().product()` readable elements of `dtype` (or is anything
/// when that product is 0).
pub unsafe fn copy_tensor(dtype: DType, dims: Vec<usize>, data: *const c_void, name: &str) -> Res<Tensor> {
    let count: usize = dims.iter().product();
    unsafe fn copy<T: Copy>(p: *const c_void, n: usize) -> Vec<T> {
        let mut v: Vec<T> = Vec::with_capacity(n);
        if n > 0 {
            std::ptr::copy_nonoverlapping(p as *const u8, v.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>());
            v.set_len(n);
        }
        v
    }
    let data = match dtype {
        DType::F32 => TensorData::F32(copy(data, count)),
        DType::F16 => TensorData::F16(copy(data, count)),
        DType::BF16 => TensorData::BF16(copy(data, count)),
        DType::F64 => TensorData::F64(copy(data, count)),
        DType::I64 => TensorData::I64(copy(data, count)),
        DType::I32 => TensorData::I32(copy(data, count)),
        DType::I16 => TensorData::I16(copy(data, count)),
        DType::I8 => TensorData::I8(copy(data, count)),
        DType::U8 => TensorData::U8(copy(data, count)),
        DType::U16 => TensorData::U16(copy(data, count)),
        DType::U32 => TensorData::U32(copy(data, count)),
        DType::U64 => TensorData::U64(copy(data, count)),
        DType::Bool => TensorData::Bool(copy::<u8>(data, count).into_iter().map(|b| b != 0).collect()),
        DType::Other(c) => {
            return Err(format!("input '{name}' has ONNX element type {c}, which Bolt does not compute"))
        }
    };
    Tensor::new(dims, data).map_err(|e| format!("input '{name}': {e}"))
}

/// Writes `t` into `dst` (an ORT buffer of `t.size_bytes()` bytes).
///
/// # Safety
/// `dst` points at a writable buffer of at least `t.size_bytes()` bytes.
// The byte-pointer cast is a no-op for the u8 variant only.
#[allow(clippy::unnecessary_cast)]
pub unsafe fn write_tensor(t: &Tensor, dst: *mut c_void) {
    let n = t.size_bytes();
    if n == 0 {
        return;
    }
    match &t.data {
        TensorData::Bool(v) => {
            let out = std::slice::from_raw_parts_mut(dst as *mut u8, v.len());
            for (o, &b) in out.iter_mut().zip(v) {
                *o = b as u8;
            }
        }
        other => {
            bolt::with_data!(other, v => std::ptr::copy_nonoverlapping(v.as_ptr() as *const u8, dst as *mut u8, n))
        }
    }
}

/// One node attribute as an AttributeProto: None for subgraphs, of type UNDEFINED where Bolt
/// cannot hold its value.
unsafe fn attribute(a: *const OrtOpAttr) -> Res<Option<proto::AttributeProto>> {
    use proto::attribute_proto::AttributeType as T;
    let ort = api().ort;
    let mut p: *const c_char = std::ptr::null();
    check((ort.OpAttr_GetName)(a, &mut p))?;
    let name = cstr(p);
    let mut ty: i32 = 0;
    check((ort.OpAttr_GetType)(a, &mut ty as *mut i32 as *mut OrtOpAttrType))?;
    let mut ap = proto::AttributeProto { name: Some(name.clone()), ..Default::default() };
    let read = |kind: OrtOpAttrType| -> Res<Vec<u8>> {
        let mut size = 0usize;
        // First ask for the size: ORT answers "buffer too small" with the size it needs.
        let st = (ort.ReadOpAttr)(a, kind, std::ptr::null_mut(), 0, &mut size);
        if !st.0.is_null() {
            (ort.ReleaseStatus)(st.0);
        }
        let mut buf = vec![0u8; size];
        if size > 0 {
            check((ort.ReadOpAttr)(a, kind, buf.as_mut_ptr() as *mut c_void, size, &mut size))
                .map_err(|e| format!("attribute '{name}': {e}"))?;
            buf.truncate(size);
        }
        Ok(buf)
    };
    match ty {
        1 => {
            let mut v = 0i64;
            let mut size = 0usize;
            check((ort.ReadOpAttr)(
                a,
                OrtOpAttrType::ORT_OP_ATTR_INT,
                &mut v as *mut i64 as *mut c_void,
                8,
                &mut size,
            ))?;
            ap.i = Some(v);
            ap.set_type(T::Int);
        }
        3 => {
            let mut v = 0f32;
            let mut size = 0usize;
            check((ort.ReadOpAttr)(
                a,
                OrtOpAttrType::ORT_OP_ATTR_FLOAT,
                &mut v as *mut f32 as *mut c_void,
                4,
                &mut size,
            ))?;
            ap.f = Some(v);
            ap.set_type(T::Float);
        }
        2 => {
            let b = read(OrtOpAttrType::ORT_OP_ATTR_INTS)?;
            ap.ints = b.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            ap.set_type(T::Ints);
        }
        4 => {
            let b = read(OrtOpAttrType::ORT_OP_ATTR_FLOATS)?;
            ap.floats = b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
            ap.set_type(T::Floats);
        }
        5 => {
            let mut b = read(OrtOpAttrType::ORT_OP_ATTR_STRING)?;
            while b.last() == Some(&0) {
                b.pop();
            }
            ap.s = Some(b);
            ap.set_type(T::String);
        }
        6 => {
            // One buffer of NUL-terminated strings.
            let mut b = read(OrtOpAttrType::ORT_OP_ATTR_STRINGS)?;
            if b.last() == Some(&0) {
                b.pop();
            }
            ap.strings = if b.is_empty() { vec![] } else { b.split(|&c| c == 0).map(<[u8]>::to_vec).collect() };
            ap.set_type(T::Strings);
        }
        8 => {
            let mut v: *mut OrtValue = std::ptr::null_mut();
            check((ort.OpAttr_GetTensorAttributeAsOrtValue)(a, &mut v))?;
            let t = value_to_proto(v, &name);
            (ort.ReleaseValue)(v);
            match t? {
                Some(t) => {
                    ap.t = Some(t);
                    ap.set_type(T::Tensor);
                }
                // Bolt holds no tensor of its type: the node stays with ORT (below).
                None => ap.set_type(T::Undefined),
            }
        }
        // Control-flow bodies: ORT offers them as graphs of their own.
        7 => return Ok(None),
        // An attribute read as a default would change the node's meaning: marked UNDEFINED, it
        // keeps the node with ORT (`import::ops`).
        _ => ap.set_type(T::Undefined),
    }
    Ok(Some(ap))
}
