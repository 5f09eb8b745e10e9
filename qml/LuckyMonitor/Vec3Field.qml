import QtQuick
import QtQuick.Controls
import QtQuick.Layouts

// A labelled x / y / z triple of numeric fields.
RowLayout {
    id: root
    property string label
    property alias textX: fx.text
    property alias textY: fy.text
    property alias textZ: fz.text
    readonly property real vx: fx.value
    readonly property real vy: fy.value
    readonly property real vz: fz.value

    Layout.fillWidth: true
    spacing: 4

    Label {
        text: root.label
        color: Theme.dim
        Layout.preferredWidth: 80
        elide: Text.ElideRight
    }
    Label { text: "x"; color: Theme.dim; font.pixelSize: Theme.small }
    NumField { id: fx; objectName: root.objectName + "_x" }
    Label { text: "y"; color: Theme.dim; font.pixelSize: Theme.small }
    NumField { id: fy; objectName: root.objectName + "_y" }
    Label { text: "z"; color: Theme.dim; font.pixelSize: Theme.small }
    NumField { id: fz; objectName: root.objectName + "_z" }
}
